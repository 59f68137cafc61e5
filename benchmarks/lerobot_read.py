"""LeRobot read throughput and memory: frames/s of SFT epochs over a video dataset larger than the frame cache.

    python benchmarks/lerobot_read.py --episodes 30 --frames 200 --size 128 --cache-mb 64 --train
    python benchmarks/lerobot_read.py --dataset data/libero --chunk 8     # any LeRobot folder

Without ``--dataset`` a synthetic LeRobot v3.0 folder is written first, by embodied's writer in a
child process (so its memory does not count): two cameras of ``--size`` pixels (AV1, as LeRobot
writes them), smooth moving content, a state and an action per frame. Then, in this process:

- **random**: an epoch of shuffled batches through a ``DataLoader`` with ``collate``, as
  ``embodied sft`` reads (each sample decodes one frame per camera: video decode included);
- **sequential**: an epoch in order (what validation and input statistics read);
- **train** (``--train``): a random epoch with a CNN policy's supervised loss and an Adam step
  on each batch: an SFT epoch without the eval.

It prints frames/s of each epoch, the dataset's decoded size against the cache's bound, the
cache's peak, and the process's peak RSS (``ru_maxrss``) before reading, after the read epochs
and after the training one (torch's and the CNN's memory on top).
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", help="a LeRobot folder to read (default: write a synthetic one)")
    p.add_argument("--episodes", type=int, default=30, help="synthetic: episodes")
    p.add_argument("--frames", type=int, default=200, help="synthetic: frames per episode")
    p.add_argument("--size", type=int, default=128, help="synthetic: camera frames are size x size (even)")
    p.add_argument("--chunk", type=int, default=4, help="action chunk C of the samples")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--cache-mb", type=float, default=64.0, help="sft.frame_cache_mb: decoded frames kept")
    p.add_argument("--train", action="store_true", help="also time an epoch with a CNN policy's loss and step")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def write_synthetic(out: Path, episodes: int, frames: int, size: int, seed: int) -> None:
    """A LeRobot folder of moving gradients and squares (so AV1 compresses it as it does camera footage)."""
    from embodied.data import DemoEpisode, Meta
    from embodied.data.lerobot import write_lerobot

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    recorded = []
    for k in range(episodes):
        cameras = {}
        for key, phase in (("main_images", 0.0), ("wrist_images", 1.5)):
            t = np.arange(frames)[:, None, None]
            base = 128 + 60 * np.sin((xx + 2 * t) / size * 6 + phase + k) * np.cos((yy - t) / size * 4)
            images = np.repeat(base[..., None], 3, axis=-1) * np.array([1.0, 0.8, 0.6])
            for f in range(frames):  # a square sliding across, as an object moving in front of the camera
                x = (f * 2 + 7 * k) % (size - size // 4)
                images[f, size // 3: size // 3 + size // 4, x: x + size // 4] = (200, 40, 40)
            cameras[key] = images.clip(0, 255).astype(np.uint8)
        recorded.append(DemoEpisode(seed=k, task=f"task {k % 4}", success=True,
                                    obs={"states": rng.normal(size=(frames, 8)).astype(np.float32), **cameras},
                                    actions=rng.uniform(-1, 1, (frames, 1, 7)).astype(np.float32),
                                    executed=np.ones((frames, 1), bool), rewards=np.zeros((frames, 1), np.float32)))
    meta = Meta(env_id="Synthetic-v0", obs_mode="state+rgb", max_episode_steps=frames, action_chunk=1, action_dim=7,
                action_low=[-1.0] * 7, action_high=[1.0] * 7, state_dim=8,
                image_shapes={"main_images": [size, size, 3], "wrist_images": [size, size, 3]}, episodes=episodes,
                successes=episodes, episodes_attempted=episodes, successes_attempted=episodes,
                rows=episodes * frames, expert="none", seed=seed, tasks=sorted({r.task for r in recorded}),
                created_by="benchmarks/lerobot_read.py")
    write_lerobot(out, recorded, meta, fps=20)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def epoch(data, batch_size: int, shuffle: bool, seed: int, step=None) -> tuple[float, int]:
    """Frames/s of one pass over ``data`` (and ``step(batch)`` on each batch), and the frames read."""
    import torch

    from embodied.data import collate

    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(seed))
    t0, n = time.perf_counter(), 0
    for batch in loader:
        n += len(batch.actions)
        if step is not None:
            step(batch)
    return n / (time.perf_counter() - t0), n


def train_step(data, seed: int):
    """A CNN policy's supervised loss and an Adam step, on batches of ``data``."""
    import torch

    from embodied.config import load_config
    from embodied.policy.base import PolicySpec, build_policy
    from embodied.runs.sft import bc_loss

    torch.manual_seed(seed)
    sample = data[0]
    action_dim = sample.actions.shape[1]
    spec = PolicySpec(sample.obs["states"].shape[0], sample.obs["main_images"].shape, action_dim, (-1.0,) * action_dim,
                      (1.0,) * action_dim, sample.obs["wrist_images"].shape)
    policy = build_policy(load_config(None, ["policy.type=cnn", f"policy.action_chunk={data.action_chunk}",
                                             "env.obs_mode=state+rgb"]).policy, spec)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)

    def step(batch) -> None:
        loss = bc_loss(policy, batch.obs, batch.actions, batch.executed)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Write (or take) the dataset, time the epochs, print a table; returns the figures."""
    import torch

    from embodied.data.lerobot import LeRobotDemos

    args = parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="lerobot-read-") as tmp:
        path = Path(args.dataset) if args.dataset else Path(tmp) / "synthetic"
        if not args.dataset:
            t0 = time.perf_counter()
            child = multiprocessing.get_context("spawn").Process(
                target=write_synthetic, args=(path, args.episodes, args.frames, args.size, args.seed))
            child.start()
            child.join()
            if child.exitcode != 0:
                raise SystemExit(f"writing the synthetic dataset failed (exit code {child.exitcode})")
            print(f"wrote {args.episodes} episodes x {args.frames} frames, 2 cameras of {args.size}^2 "
                  f"(AV1) in {time.perf_counter() - t0:.1f} s")
        rss_before = peak_rss_mib()
        data = LeRobotDemos(path, action_chunk=args.chunk, frame_cache_mb=args.cache_mb)
        cameras = [k for k in ("main_images", "wrist_images") if k in data.obs_keys]
        decoded = sum(np.prod(data.resolved[k].feature.image_shape) for k in cameras) * len(data) / 2**20
        disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20
        figures = {"frames": float(len(data)), "decoded_mib": float(decoded), "disk_mib": disk,
                   "cache_mib": args.cache_mb, "rss_before_mib": rss_before}
        figures["random_fps"], _ = epoch(data, args.batch_size, True, args.seed)
        figures["sequential_fps"], _ = epoch(data, args.batch_size, False, args.seed)
        figures["rss_read_mib"] = peak_rss_mib()
        if args.train:
            figures["train_fps"], _ = epoch(data, args.batch_size, True, args.seed + 1, train_step(data, args.seed))
            figures["rss_train_mib"] = peak_rss_mib()
        figures["cache_peak_mib"] = data.cache.peak_bytes / 2**20
    print(f"{path.name if args.dataset else 'synthetic'}: {len(data)} frames, {len(cameras)} cameras, "
          f"chunk {args.chunk}, batch {args.batch_size}; decoded {decoded:.0f} MiB (on disk {disk:.1f} MiB), "
          f"frame cache {args.cache_mb:g} MiB")
    print(f"{'epoch':28s} {'frames/s':>10s}")
    for name, key in (("random (SFT's shuffled read)", "random_fps"), ("sequential", "sequential_fps"),
                      ("random + CNN loss and step", "train_fps")):
        if key in figures:
            print(f"{name:28s} {figures[key]:10.0f}")
    print(f"frame cache peak {figures['cache_peak_mib']:.1f} MiB; peak RSS: {rss_before:.0f} MiB before reading, "
          f"{figures['rss_read_mib']:.0f} MiB after the read epochs"
          + (f", {figures['rss_train_mib']:.0f} MiB after the training epoch" if args.train else ""))
    return figures


if __name__ == "__main__":
    main()

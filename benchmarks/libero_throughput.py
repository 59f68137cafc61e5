"""LIBERO through the framework against a raw LIBERO loop, on the same task, cameras and image size.

    python benchmarks/libero_throughput.py                    # LIBERO-Object task 0, 128 px, agentview + wrist
    python benchmarks/libero_throughput.py --image-size 256 --steps 400 --out docs/libero/bench.json

Prints, measured side by side in one run:

- env steps/s of a raw ``OffScreenRenderEnv`` loop (robosuite renders both cameras itself), and of
  the framework's rollout (``Workers.rollout`` with a random policy: env workers, rollout workers,
  channels) on the local backend with one env worker and on Ray with one and two (one env each);
  the ratios the goals name: framework local / raw (goal >= 0.95) and Ray E=2 / local E=1 (>= 1.8);
- the cost of one env: build time, soft and hard reset time, resident memory;
- both cameras rendered in one pass against one render per camera: time and pixel equality;
- the share of a rollout epoch that auto-resets take (reset + settle steps), measured with short
  episodes and projected to the suite's published cap from the measured costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def env_kwargs(task: int, size: int) -> str:
    return f"env.kwargs={{task_ids: [{task}], image_size: {size}}}"


def raw_loop(task: int, size: int, steps: int) -> float:
    """Env steps/s of LIBERO's own ``OffScreenRenderEnv`` with both cameras, random actions, one env."""
    from embodied.envs.adapters.libero.suites import import_libero, suite_tasks

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    info = suite_tasks("libero_object")[task]
    env = OffScreenRenderEnv(bddl_file_name=info.bddl_file, camera_heights=size, camera_widths=size,
                             hard_reset=False)
    rng = np.random.default_rng(0)
    try:
        env.reset()
        for _ in range(10):  # warm-up (numba compiles robosuite's controller on the first step)
            env.step(rng.uniform(-1, 1, 7))
        t0 = time.perf_counter()
        for _ in range(steps):
            env.step(rng.uniform(-1, 1, 7))
        return steps / (time.perf_counter() - t0)
    finally:
        env.close()


def framework(task: int, size: int, steps: int, backend: str, env_workers: int, max_steps: int = 280) -> float:
    from embodied.bench.throughput import framework_rate

    extra = ["env.id=LIBERO-Object-v0", "env.obs_mode=state+rgb", env_kwargs(task, size),
             f"env.max_episode_steps={max_steps}", "cluster.torch_threads=1"]
    rate = framework_rate(env_workers, chunk=4, steps=steps, backend_name=backend, chunk_steps=8,
                          max_episode_steps=max_steps, seed=0, obs_mode="state+rgb", env_workers=env_workers,
                          extra=extra)
    return rate.steps_per_s


def env_costs(task: int, size: int, repeats: int = 3) -> dict[str, float]:
    """Build, soft and hard reset seconds and resident MiB of one env, in this process."""
    import psutil

    from embodied.envs.adapters.libero.env import LiberoObject

    proc = psutil.Process()
    before = proc.memory_info().rss
    t0 = time.perf_counter()
    env = LiberoObject(obs_mode="state+rgb", task_ids=[task], image_size=size, settle_steps=0)
    build = time.perf_counter() - t0
    rss = (proc.memory_info().rss - before) / 2**20
    hard = LiberoObject(obs_mode="state+rgb", task_ids=[task], image_size=size, settle_steps=0, hard_reset=True)
    try:
        env.reset(seed=0)
        hard.reset(seed=0)
        soft_s, hard_s = [], []
        for k in range(repeats):
            t0 = time.perf_counter()
            env.reset(options={"task_id": task, "init_state": k})
            soft_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            hard.reset(options={"task_id": task, "init_state": k})
            hard_s.append(time.perf_counter() - t0)
        frames = {}
        for one_pass in (False, True, False, True):
            env.one_pass = one_pass
            t0 = time.perf_counter()
            for _ in range(20):
                got = env._render(("agentview", "robot0_eye_in_hand"))
            frames.setdefault(one_pass, []).append((time.perf_counter() - t0) / 20)
            frames[f"pixels {one_pass}"] = got
        equal = all(np.array_equal(a, b) for a, b in zip(frames["pixels False"], frames["pixels True"]))
        diff = max(int(np.abs(a.astype(int) - b).max()) for a, b in zip(frames["pixels False"], frames["pixels True"]))
        settle = []
        for _ in range(10):
            t0 = time.perf_counter()
            env.step(np.array([0, 0, 0, 0, 0, 0, -1], np.float32))
            settle.append(time.perf_counter() - t0)
    finally:
        env.close()
        hard.close()
    return {"build_s": build, "rss_mib": rss, "soft_reset_s": statistics.median(soft_s),
            "hard_reset_s": statistics.median(hard_s), "render_per_camera_s": min(frames[False]),
            "render_one_pass_s": min(frames[True]), "one_pass_pixel_equal": equal, "one_pass_max_diff": diff,
            "step_s": statistics.median(settle)}


def reset_share(task: int, size: int, max_steps: int) -> dict[str, float]:
    """Seconds in auto-resets (reset + settle steps) over a local rollout with episodes of ``max_steps``."""
    from embodied.bench.random_policy import register_random_policy
    from embodied.config import load_config
    from embodied.envs.adapters.libero.env import LiberoEnv
    from embodied.backends import make_backend
    from embodied.workers.group import Workers

    spent = [0.0, 0]
    original = LiberoEnv.reset

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    register_random_policy()
    cfg = load_config(None, ["env.id=LIBERO-Object-v0", "env.obs_mode=state+rgb", env_kwargs(task, size),
                             f"env.max_episode_steps={max_steps}", "env.num_envs=1", "eval_env.num_envs=1",
                             "env.preflight=false", "policy.type=random", "policy.action_chunk=4",
                             "rollout.chunk_steps=16", "logger.backends=[]"])
    backend = make_backend(cfg.cluster)
    LiberoEnv.reset = timed
    try:
        workers = Workers.start(cfg, backend)
        workers.sync_weights()
        workers.rollout(16)
        spent[:] = [0.0, 0]
        t0 = time.perf_counter()
        steps = sum(t.num_env_steps for _ in range(3) for t in workers.rollout(16))
        total = time.perf_counter() - t0
        workers.close()
    finally:
        LiberoEnv.reset = original
        backend.shutdown()
    return {"episode_steps": max_steps, "rollout_s": total, "env_steps": steps, "resets": spent[1],
            "reset_s": spent[0], "share": spent[0] / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=int, default=0, help="LIBERO-Object task id")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=200, help="env steps timed per path")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    size, steps = args.image_size, args.steps

    costs = env_costs(args.task, size)
    raw = raw_loop(args.task, size, steps)
    local1 = framework(args.task, size, steps, "local", 1)
    ray1 = framework(args.task, size, steps, "ray", 1)
    ray2 = framework(args.task, size, 2 * steps, "ray", 2)
    share = reset_share(args.task, size, max_steps=40)
    per_reset = share["reset_s"] / max(share["resets"], 1)
    cap = 280
    projected = per_reset / (per_reset + cap / local1)
    figures = {"task": args.task, "image_size": size, "cameras": ["agentview", "robot0_eye_in_hand"],
               "raw_steps_per_s": raw, "local_e1": local1, "ray_e1": ray1, "ray_e2": ray2,
               "local_over_raw": local1 / raw, "ray_e2_over_local_e1": ray2 / local1, "env": costs,
               "auto_reset": share | {"per_reset_s": per_reset, "projected_share_at_280": projected},
               "cpus": os.cpu_count()}
    print(f"LIBERO-Object task {args.task}, {size} px, agentview + wrist, {os.cpu_count()} CPUs")
    print("| path | env steps/s | ratio |\n|---|---|---|")
    print(f"| raw OffScreenRenderEnv loop, 1 env | {raw:.1f} | 1.00 |")
    print(f"| framework local, E=1 (1 env) | {local1:.1f} | {local1 / raw:.2f} x raw (goal >= 0.95) |")
    print(f"| framework Ray, E=1 (1 env) | {ray1:.1f} | {ray1 / raw:.2f} x raw |")
    print(f"| framework Ray, E=2 (1 env each) | {ray2:.1f} | {ray2 / local1:.2f} x local E=1 (goal >= 1.8) |")
    print(f"one env: build {costs['build_s']:.1f} s, RSS {costs['rss_mib']:.0f} MiB, soft reset "
          f"{costs['soft_reset_s']:.2f} s, hard reset {costs['hard_reset_s']:.2f} s, a step {costs['step_s'] * 1e3:.0f} ms")
    print(f"render both cameras: one per camera {costs['render_per_camera_s'] * 1e3:.1f} ms, one pass "
          f"{costs['render_one_pass_s'] * 1e3:.1f} ms (pixel-equal: {costs['one_pass_pixel_equal']}, max diff "
          f"{costs['one_pass_max_diff']})")
    print(f"auto-reset: {share['resets']} resets took {share['reset_s']:.1f} s of a {share['rollout_s']:.1f} s "
          f"rollout with {share['episode_steps']}-step episodes ({share['share']:.1%}); {per_reset:.2f} s each "
          f"(reset + 10 settle steps), so {projected:.1%} of an epoch at the published 280-step cap")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()

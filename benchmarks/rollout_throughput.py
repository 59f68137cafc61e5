"""Rollout throughput: env steps per second of the framework's rollout path beside raw gymnasium.

    python benchmarks/rollout_throughput.py --num-envs 32 --chunk 8 --steps 20000 --backend local

"framework" times ``Workers.rollout`` (env workers stepping a ``ChunkedVectorEnv`` of ``Reach-v0``,
rollout workers acting, shards travelling through the channels) with a random policy, so the
figure is the engine's overhead on top of the simulator, not a model's inference time. "raw"
steps the same task in a ``gymnasium.vector.SyncVectorEnv`` with one batched random action per
step. Both count sub-steps that really ran (env steps) and both run after a warm-up. The parts
live in ``embodied.bench`` (``embodied bench`` runs the whole matrix).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402

from embodied.bench.random_policy import RandomConfig, RandomPolicy, register_random_policy  # noqa: E402,F401
from embodied.bench.throughput import Rate, framework_rate, raw_rate  # noqa: E402,F401


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=32, help="parallel envs (N)")
    p.add_argument("--chunk", type=int, default=8, help="policy.action_chunk (C)")
    p.add_argument("--steps", type=int, default=20000, help="env steps to time on each path (after warm-up)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="cluster.backend of the framework")
    p.add_argument("--chunk-steps", type=int, default=16, help="rollout.chunk_steps: chunk steps per rollout epoch")
    p.add_argument("--max-episode-steps", type=int, default=50, help="env.max_episode_steps")
    p.add_argument("--stages", type=int, default=1, help="rollout.pipeline_stages")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("num_envs", "chunk", "steps", "chunk_steps", "max_episode_steps", "stages"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run both paths, print a table, return the rates (env steps/s) and their ratio."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    # No more chunk steps per epoch than the whole budget needs (small runs stay small).
    chunk_steps = min(args.chunk_steps, math.ceil(args.steps / (args.num_envs * args.chunk)))
    fw = framework_rate(args.num_envs, args.chunk, args.steps, args.backend, chunk_steps, args.max_episode_steps,
                        args.seed, args.stages)
    raw = raw_rate(args.num_envs, fw.env_steps, args.max_episode_steps, args.seed)
    ratio = fw.steps_per_s / raw.steps_per_s
    print(f"Reach-v0, state obs, {args.num_envs} envs, action chunk {args.chunk}, "
          f"{chunk_steps} chunk steps per rollout epoch, random actions")
    print(f"{'path':32s} {'env steps':>10s} {'seconds':>9s} {'env steps/s':>12s}")
    fw.name = f"framework ({args.backend}, {args.stages} stage{'s' if args.stages > 1 else ''})"
    for rate in (fw, raw):
        print(f"{rate.name:32s} {rate.env_steps:10d} {rate.seconds:9.3f} {rate.steps_per_s:12.0f}")
    print(f"{'framework / raw':32s} {'':10s} {'':9s} {ratio:12.3f}")
    return {"framework": fw.steps_per_s, "raw": raw.steps_per_s, "ratio": ratio}


if __name__ == "__main__":
    main()

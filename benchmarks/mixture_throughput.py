"""Env steps/s of a mixture of two LIBERO suites against each suite alone, same batch, same process, in turn.

    python benchmarks/mixture_throughput.py                   # LIBERO-Object + LIBERO-Spatial, state+rgb, 2 envs
    python benchmarks/mixture_throughput.py --members LIBERO-Object-v0,LIBERO-Object-TempX0.1-v0 --obs-mode state

Every batch is built through the env factory (``make_vector_env``: what an env worker builds) with the same
number of envs, obs mode and episode cap: one of each member alone, one of the mixture (``env.id`` the list, equal
shares). Each is stepped with random action chunks for ``--chunks`` chunk steps (auto-reset on), ``--rounds``
times, in turn, and the median env steps/s of each is printed. The suites' scenes differ in cost, so the mixture is
held against what its members would give with nothing spent on mixing: each member's share of the batch stepping at
that member's own rate (the time of a step is the members' times weighted by their shares). Goal: mixture /
that >= 0.95. The mixture's own work is bookkeeping (member slices at build, the member id on each finished
episode).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def steps_per_s(venv, chunks: int, chunk: int, seed: int) -> float:
    """Env steps/s of ``chunks`` random chunk steps (sub-steps really executed, over wall time)."""
    rng = np.random.default_rng(seed)
    dim = venv.single_action_space.shape[0]
    venv.reset(seed=seed)
    executed, t0 = 0, time.perf_counter()
    for _ in range(chunks):
        result = venv.chunk_step(rng.uniform(-1, 1, (venv.num_envs, chunk, dim)).astype(np.float32))
        executed += int(result.executed.sum())
    return executed / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Print the figures; return the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="LIBERO-Object-v0,LIBERO-Spatial-v0")
    parser.add_argument("--obs-mode", default="state+rgb", choices=["state", "rgb", "state+rgb"])
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=40, help="chunk steps a measurement")
    parser.add_argument("--chunk", type=int, default=4, help="sub-steps a chunk")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each, alternating")
    parser.add_argument("--max-episode-steps", type=int, default=100)
    parser.add_argument("--kwargs", default='{"task_ids": [0]}', help="env.kwargs of every member, as JSON")
    args = parser.parse_args(argv)
    import json

    from embodied.config.schema import EnvConfig
    from embodied.env_runtime.factory import check_env_config, make_vector_env

    members = [m.strip() for m in args.members.split(",")]
    common = dict(num_envs=args.num_envs, obs_mode=args.obs_mode, max_episode_steps=args.max_episode_steps,
                  kwargs=json.loads(args.kwargs), vectorization="per_env")
    mixture = EnvConfig(id=members, **common)
    check_env_config(mixture)  # members with other spaces are named here
    venvs = {m: make_vector_env(EnvConfig(id=m, **common), args.num_envs) for m in members}
    venvs["mixture"] = make_vector_env(mixture, args.num_envs)
    figures: dict[str, list[float]] = {name: [] for name in venvs}
    try:
        for r in range(args.rounds):
            for name, venv in venvs.items():
                figures[name].append(steps_per_s(venv, args.chunks, args.chunk, seed=r))
    finally:
        for venv in venvs.values():
            venv.close()
    print(f"{args.num_envs} envs, obs {args.obs_mode}, {args.chunks} chunks of {args.chunk}, {args.rounds} rounds "
          f"each (in turn); mixture: {', '.join(members)} (shares {mixture.member_counts()})")
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, values in figures.items():
        print(f"  {name:28s} median {medians[name]:7.1f} env steps/s  (min {min(values):.1f}, max {max(values):.1f})")
    shares = [n / args.num_envs for n in mixture.member_counts()]
    expected = 1.0 / sum(share / medians[m] for share, m in zip(shares, members))
    ratio = medians["mixture"] / expected
    print(f"  members at their own rates, by share: {expected:.1f} env steps/s")
    print(f"  mixture / that: {ratio:.3f} (goal >= 0.95); mixture / {members[0]} alone: "
          f"{medians['mixture'] / medians[members[0]]:.3f}")
    return medians | {"expected": expected, "ratio": ratio}


if __name__ == "__main__":
    main()

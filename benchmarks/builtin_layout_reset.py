"""What layout randomization (``env.kwargs.layout_shift_x/y``, ``layout_swap``) costs a built-in task's reset,
and whether the scripted experts still solve the moved scenes.

    .venv/bin/python -m benchmarks.builtin_layout_reset
    .venv/bin/python -m benchmarks.builtin_layout_reset --rounds 41 --resets 200 --episodes 50

For each task, plain resets (no settings) and randomized ones (the largest shift that fits with a swap
probability of 0.5; Reach: shift only, it has nothing to swap) are timed side by side: rounds of ``--resets``
unseeded resets (as training's auto-resets are) alternate between the two, and each reports its median
microseconds per reset over ``--rounds``; the same for the batched twin's seeded reset of ``--num-envs`` envs.
The ratio is randomized / plain (target <= 1.5). Then each task's expert runs ``--episodes`` randomized
episodes (seeds 1000..), and its success rate is printed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from embodied.envs.experts import expert_for
from embodied.envs.mujoco_base import TableTopEnv
from embodied.envs.pick_color import PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.reach import ReachEnv
from embodied.envs.stack import StackEnv

# The largest shift each task fits (envs/layout.py refuses more) with the swap shown; Push keeps a run-up
# behind its cube (0.07 without a swap, 0.04 with one, which may put the cube where the goal was).
SETTINGS: dict[type[TableTopEnv], dict[str, float]] = {
    ReachEnv: dict(layout_shift_x=0.05, layout_shift_y=0.05),
    PushEnv: dict(layout_shift_x=0.04, layout_shift_y=0.04, layout_swap=0.5),
    PickPlaceEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
    StackEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
    PickColorEnv: dict(layout_shift_x=0.1, layout_shift_y=0.1, layout_swap=0.5),
}


def median_us(plain: Callable[[], Any], randomized: Callable[[], Any], rounds: int, calls: int) -> tuple[float, float]:
    """Median microseconds per call of each, over ``rounds`` alternating rounds of ``calls`` calls (alternating,
    so a neighbour's load on a shared machine falls on both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, out in ((plain, times[0]), (randomized, times[1])):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times[0]), statistics.median(times[1])


def scalar_reset_us(task: type[TableTopEnv], rounds: int, resets: int) -> tuple[float, float]:
    """Median us of one unseeded ``reset()`` of the per-env task, plain and randomized."""
    plain, moved = task(), task(**SETTINGS[task])
    plain.reset(seed=0)
    moved.reset(seed=0)
    return median_us(plain.reset, moved.reset, rounds, resets)


def twin_reset_us(task: type[TableTopEnv], rounds: int, resets: int, num_envs: int) -> tuple[float, float]:
    """Median us per env of the batched twin's seeded ``reset`` of ``num_envs`` envs, plain and randomized."""
    twin = task.batched_twin("state")
    plain, moved = twin(num_envs=num_envs, nthread=1), twin(num_envs=num_envs, nthread=1, **SETTINGS[task])
    try:
        calls = max(1, resets // num_envs)
        a, b = median_us(lambda: plain.reset(seed=0), lambda: moved.reset(seed=0), rounds, calls)
        return a / num_envs, b / num_envs
    finally:
        plain.close()
        moved.close()


def expert_success(task: type[TableTopEnv], episodes: int) -> float:
    """Fraction of ``episodes`` randomized episodes (seeds 1000..) the task's scripted expert solves."""
    env = task(**SETTINGS[task])
    expert, solved = expert_for(env), 0
    for seed in range(1000, 1000 + episodes):
        obs, _ = env.reset(seed=seed)
        expert.reset(env)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(expert.act(env, obs))
        solved += bool(terminated and info["success"])
    return solved / episodes


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print one row per task (reset costs, ratios, expert success) and return them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31, help="alternating timing rounds (the median is taken)")
    parser.add_argument("--resets", type=int, default=200, help="resets per round")
    parser.add_argument("--num-envs", type=int, default=16, help="envs of the batched twin")
    parser.add_argument("--episodes", type=int, default=50, help="randomized expert episodes per task (0: skip)")
    args = parser.parse_args(argv)
    print(f"{'task':<14} {'settings':<34} {'scalar us plain/rand':>21} {'ratio':>6} "
          f"{'twin us/env plain/rand':>23} {'ratio':>6} {'expert':>7}")
    rows = {}
    for task in SETTINGS:
        a, b = scalar_reset_us(task, args.rounds, args.resets)
        c, d = twin_reset_us(task, args.rounds, args.resets, args.num_envs)
        success = expert_success(task, args.episodes) if args.episodes else float("nan")
        rows[task.__name__] = dict(scalar_plain_us=a, scalar_random_us=b, twin_plain_us=c, twin_random_us=d,
                                   expert_success=success)
        settings = ",".join(f"{k.removeprefix('layout_')}={v:g}" for k, v in SETTINGS[task].items())
        print(f"{task.__name__:<14} {settings:<34} {a:>10.1f}/{b:<10.1f} {b / a:>6.2f} "
              f"{c:>11.1f}/{d:<11.1f} {d / c:>6.2f} {success:>7.0%}", flush=True)
    return rows


if __name__ == "__main__":
    main()

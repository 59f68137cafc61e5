"""The cost of LIBERO's layout randomization at training resets, and the scripted expert's success under it.

    MUJOCO_GL=egl python benchmarks/libero_layout_reset.py                 # LIBERO-Object task 0, 15 resets each
    MUJOCO_GL=egl python benchmarks/libero_layout_reset.py --expert 30     # also 30 expert episodes, randomized

Two ``state``-mode envs of one task are built, one plain and one with ``layout_shift_x``/``layout_shift_y``/
``layout_swap`` (0.3/0.3/0.5 by default); their training resets alternate, so both see the same load on the
machine. Prints the median reset time of each (robosuite's reset and the settle steps included), the ratio
(target <= 1.5x) and the median time of the layout step alone. ``--expert N`` then plays
``LiberoObjectExpert`` for N randomized training resets of the randomized env (each episode up to the suite's
cap of 280 steps) and prints its success rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def median_ms(samples: list[float]) -> float:
    return 1000.0 * statistics.median(samples)


def time_resets(plain: Any, randomized: Any, resets: int) -> tuple[list[float], list[float], list[float]]:
    """Seconds of each training reset of the two envs, alternating, and of the layout step alone."""
    plain_s, randomized_s, layout_s = [], [], []
    for _ in range(resets):
        for env, out in ((plain, plain_s), (randomized, randomized_s)):
            start = time.perf_counter()
            env.reset()
            out.append(time.perf_counter() - start)
    layout = randomized._scene_layout()
    sim = randomized.robosuite_env.sim
    placed = sim.data.qpos.copy()
    for _ in range(resets):
        sim.data.qpos[:] = placed
        start = time.perf_counter()
        layout.apply(randomized._rng)
        layout_s.append(time.perf_counter() - start)
    return plain_s, randomized_s, layout_s


def expert_success(env: Any, episodes: int) -> tuple[int, list[int]]:
    """Successful episodes of the scripted expert over ``episodes`` randomized training resets, and each length."""
    from embodied.envs.adapters.libero.expert import LiberoObjectExpert

    expert, wins, lengths = LiberoObjectExpert(), 0, []
    for k in range(episodes):
        obs, _ = env.reset()
        expert.reset(env)
        steps, done, success = 0, False, False
        while not done:
            obs, _, success, truncated, _ = env.step(expert.act(env, obs))
            steps, done = steps + 1, success or truncated
        wins += int(success)
        lengths.append(steps)
        print(f"  episode {k:>3}: {'success' if success else 'failure'} in {steps:>3} steps; {where(env)}"
              f" (expert phase {expert.phase})", flush=True)
    return wins, lengths


def where(env: Any) -> str:
    """Where the layout put the target: its distance from the robot's base and from its nearest neighbour."""
    layout, u = env.last_layout, env.robosuite_env
    target = env._scene_layout().target
    base = u.sim.data.get_body_xpos(u.robots[0].robot_model.root_body)[:2]
    reach = float(np.hypot(*(layout.after[target] - base)))
    near = min(float(np.hypot(*(xy - layout.after[target]))) for n, xy in layout.after.items() if n != target)
    swap = f", swapped with {layout.swapped[1]}" if layout.swapped else ""
    return f"target {reach:.2f} m from the base, {near:.2f} m from the nearest object{swap}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--resets", type=int, default=15, help="training resets timed per env")
    parser.add_argument("--shift", type=float, nargs=2, default=[0.3, 0.3], metavar=("X", "Y"))
    parser.add_argument("--swap", type=float, default=0.5)
    parser.add_argument("--expert", type=int, default=0, help="expert episodes on randomized resets (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from embodied.envs.adapters.libero.env import LiberoObject

    common: dict[str, Any] = dict(obs_mode="state", task_ids=[args.task])
    plain = LiberoObject(**common, env_index=args.seed)
    randomized = LiberoObject(**common, env_index=args.seed, layout_shift_x=args.shift[0],
                              layout_shift_y=args.shift[1], layout_swap=args.swap)
    try:
        plain.reset(seed=args.seed)
        randomized.reset(seed=args.seed)  # first resets warm both up (numba's controller, caches): not timed
        plain_s, randomized_s, layout_s = time_resets(plain, randomized, args.resets)
        print(f"LIBERO-Object task {args.task}, {args.resets} training resets each ({randomized.layout.describe()})")
        print(f"{'plain reset':>18}  {'randomized reset':>18}  {'ratio':>6}  {'layout step':>12}")
        print(f"{median_ms(plain_s):>15.1f} ms  {median_ms(randomized_s):>15.1f} ms  "
              f"{median_ms(randomized_s) / median_ms(plain_s):>5.2f}x  {median_ms(layout_s):>9.2f} ms")
        plain.close()
        if args.expert:
            wins, lengths = expert_success(randomized, args.expert)
            print(f"expert: {wins}/{args.expert} successes ({wins / args.expert:.0%}), median length "
                  f"{statistics.median(lengths):.0f} steps")
    finally:
        plain.close()
        randomized.close()


if __name__ == "__main__":
    main()

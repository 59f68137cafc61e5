"""``embodied check-env ID``: validate a simulator against the contracts before training on it.

    embodied check-env Reach-v0 --steps 200
    embodied check-env my_pkg.my_env:MyEnv --obs-mode rgb --kwargs '{"difficulty": 2}'
    embodied check-env my_pkg.my_env:MyEnv --json      # for CI: a list of {name, passed, detail, fix, severity}

Every row is PASS, WARN (the run works, but results degrade: no ``info['success']``, a reset that
ignores its seed, no ``render()`` for videos, no task description) or FAIL with what is wrong and
how to fix it; the exit code is non-zero if any row fails. The env is built exactly as the env
workers build it (``embodied.env_runtime.factory``), so a plain gymnasium class is checked through the
gymnasium adapter. An error that stops every check (an import error, a constructor that does not
fit the config, a crash on reset) is one row; a crash inside the env's own code prints the env's
own traceback (file and line) above the table.

A per-env gymnasium env gets: import/construct/reset, spaces, step's 5-tuple, observations (keys,
dtypes, shapes, finite), ``info['success']``, seed determinism, action bounds, the episode ending
within ``max_episode_steps``, ``render()``, ``task_description``, and (not in the ``fast`` subset
that ``embodied train`` / ``embodied eval`` run as their preflight) gymnasium's own ``check_env`` and
the chunk-step rules through ``ChunkedVectorEnv``. A ``BatchedEnv`` gets the same checks through
``chunk_step``, plus ``final_obs`` with ``auto_reset`` on and done envs staying done with it off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from contextlib import ExitStack
from typing import Literal

from embodied.config import EnvConfig
from embodied.env_runtime.check_env.batched import BatchedChecks
from embodied.env_runtime.check_env.diagnosis import CheckFailed, describe_target
from embodied.env_runtime.check_env.load import resolve_target
from embodied.env_runtime.check_env.rows import (LOAD, CheckResult, RenderCheck, Rows, Severity, format_table,
                                                 print_json, print_table)
from embodied.env_runtime.check_env.single import SingleChecks
from embodied.env_runtime.factory import batched_twin, episode_steps
from embodied.envs.batched import is_batched

__all__ = ["LOAD", "CheckFailed", "CheckResult", "RenderCheck", "Severity", "build_parser", "check_env",
           "describe_target", "format_table", "main", "print_table"]


def check_env(cfg: EnvConfig, steps: int = 100, chunk: int = 4, seed: int = 0, fast: bool = False,
              render: RenderCheck = "check", render_path: Literal["both", "per_env", "native"] = "both"
              ) -> list[CheckResult]:
    """Run every check that applies to ``cfg.id`` (``fast``: the preflight's subset) and return one row each.

    ``render_path`` says where frames are checked when a built-in task also has a batched twin: on both
    paths, or only on the one that records the videos (the preflight's choice: a render check builds an env
    and a GL context, a tenth of a second of the start-up). An env with one path always has it checked.
    """
    rows = Rows(cfg)
    with ExitStack() as stack:
        target = rows.run(LOAD, lambda: resolve_target(cfg), record=False)
        if rows.stopped:
            return rows.results
        rows.target = target
        cfg = rows.cfg = dataclasses.replace(cfg, max_episode_steps=episode_steps(cfg, target))  # what workers use
        kind = BatchedChecks if is_batched(target) else SingleChecks
        twin = batched_twin(target, cfg)  # the path env workers take by default: its rows follow the per-env ones
        own_render = render if twin is None or render_path != "native" else "skip"
        kind(rows, cfg, target, stack, seed=seed, steps=steps, chunk=chunk, fast=fast, render=own_render).run_all()
        if twin is not None and not rows.stopped:
            BatchedChecks(rows, cfg, twin, stack, seed=seed, steps=steps, chunk=chunk, fast=fast,
                          render=render if render_path != "per_env" else "skip").run_all()
    return rows.results


def build_parser(prog: str = "embodied check-env") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                     epilog="Exit status: 0 if no check fails (warnings allowed), 1 otherwise.")
    parser.add_argument("id", help="registered env id, gymnasium id, or package.module:Class")
    parser.add_argument("--steps", type=int, default=100, help="sub-steps of random actions for the chunk rules")
    parser.add_argument("--chunk", type=int, default=4, help="action chunk length used for the chunk rules")
    parser.add_argument("--obs-mode", default="state", choices=["state", "rgb", "state+rgb"])
    parser.add_argument("--max-episode-steps", type=int, default=None,
                        help="episode cap in env steps (default: the env's own, else 50; env.max_episode_steps)")
    parser.add_argument("--kwargs", default="{}", help="JSON object of extra constructor arguments (env.kwargs)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the checks")
    parser.add_argument("--fast", action="store_true",
                        help="only the preflight's fast subset (for simulators that take seconds to build or step)")
    parser.add_argument("--json", action="store_true",
                        help="print the rows as a JSON list of {name, passed, detail, fix, severity} (tracebacks "
                             "go to stderr)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as exc:
        parser.error(f"--kwargs is not JSON: {exc}")
    if not isinstance(kwargs, dict):
        parser.error(f"--kwargs must be a JSON object, got {args.kwargs}")
    cfg = EnvConfig(id=args.id, num_envs=2, obs_mode=args.obs_mode, max_episode_steps=args.max_episode_steps,
                    kwargs=kwargs)
    results = check_env(cfg, steps=args.steps, chunk=args.chunk, seed=args.seed, fast=args.fast)
    if args.json:
        print_json(results)
    else:
        print_table(args.id, results)
    return 1 if any(r.severity == "error" for r in results) else 0

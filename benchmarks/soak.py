"""Soak: a recipe run for a long time with env-worker restarts forced every so often; memory per process.

    .venv/bin/python -m benchmarks.soak configs/reach_mlp_ppo.yaml --minutes 30
    .venv/bin/python -m benchmarks.soak configs/reach_mlp_ppo.yaml --minutes 30 cluster.backend=ray
    .venv/bin/python -m benchmarks.soak configs/pick_color_cnn_ppo.yaml --minutes 30 --restart-every-s 90

The recipe's env is wrapped in ``ChaosEnv``, whose ``step`` raises once every ``--restart-every-s`` seconds
in each process: a transient fault (the exact replay of the epoch passes), so each one is an env-worker
restart and the run goes on as it would have. ``runner.faults.max_worker_restarts`` is lifted (and the backoff and the
broken-env diagnosis, which a fault forced every few seconds in every process would trigger, are off), the run is
stopped after ``--minutes`` (SIGTERM: it saves a checkpoint and stops), and ``metrics.jsonl`` is read
back: for every ``sys/rss_mib/<worker>`` its value after warm-up, at the end, and its least-squares slope
in MiB per hour over the rows after the first ``--warmup`` fraction of the time; then the restarts survived.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import load_config, to_dict
from embodied.core.registry import ENVS
from embodied.runs.train import train

_LAST_FAULT = {"at": time.monotonic()}  # per process: a restarted Ray worker (a new process) waits a full period


class ChaosEnv(gym.Wrapper):
    """The env ``inner`` (an env id following embodied's constructor convention, with ``inner_kwargs``) whose
    ``step`` raises ``RuntimeError`` once every ``every_s`` seconds in this process."""

    def __init__(self, inner: str, every_s: float, inner_kwargs: dict[str, Any] | None = None,
                 obs_mode: str = "state", max_episode_steps: int = 50, render_mode: str | None = None) -> None:
        extra = {} if render_mode is None else {"render_mode": render_mode}
        super().__init__(ENVS.resolve(inner)(obs_mode=obs_mode, max_episode_steps=max_episode_steps,
                                             **(inner_kwargs or {}), **extra))
        self.every_s = every_s

    def step(self, action: Any) -> Any:
        now = time.monotonic()
        if now - _LAST_FAULT["at"] >= self.every_s:
            _LAST_FAULT["at"] = now
            raise RuntimeError(f"soak: the fault forced every {self.every_s:g} s")
        return self.env.step(action)


def rss_report(run_dir: Path, warmup: float) -> dict[str, dict[str, float]]:
    """Per ``sys/rss_mib/<worker>`` of ``metrics.jsonl``: MiB after warm-up and at the end, slope in MiB/hour."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not rows:
        return {}
    start, end = rows[0]["time"], rows[-1]["time"]
    kept = [r for r in rows if r["time"] >= start + warmup * (end - start)] or rows[-1:]
    report = {}
    for key in sorted({k for r in kept for k in r if k.startswith("sys/rss_mib/")}):
        t = np.array([r["time"] for r in kept if key in r])
        mib = np.array([r[key] for r in kept if key in r])
        slope = float(np.polyfit(t - t[0], mib, 1)[0] * 3600) if len(t) > 2 and t[-1] > t[0] else float("nan")
        report[key.removeprefix("sys/rss_mib/")] = {"after_warmup": float(mib[0]), "end": float(mib[-1]),
                                                     "slope_mib_per_h": slope}
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a recipe (YAML)")
    parser.add_argument("overrides", nargs="*", help="section.field=value overrides")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument("--restart-every-s", type=float, default=60.0,
                        help="seconds between forced env faults in each env worker process (default 60)")
    parser.add_argument("--warmup", type=float, default=0.2, help="fraction of the run left out of the slope")
    args = parser.parse_intermixed_args(argv)  # overrides may follow the flags
    cfg = load_config(args.config, args.overrides)
    wrapped = {"inner": cfg.env.id, "every_s": args.restart_every_s, "inner_kwargs": dict(cfg.env.kwargs)}
    cfg = load_config(args.config, [*args.overrides, "env.id=benchmarks.soak:ChaosEnv",
                                    f"env.kwargs={json.dumps(wrapped)}", f"eval_env.id={cfg.resolved_eval_env().id}",
                                    f"eval_env.kwargs={json.dumps(cfg.resolved_eval_env().kwargs)}",
                                    "runner.iterations=1000000", "runner.faults.max_worker_restarts=1000000",
                                    # forced faults, not a flapping or broken simulator: no backoff, no diagnosis
                                    "runner.faults.restart_backoff_s=0", "runner.faults.broken_env_iterations=null",
                                    "runner.keep_checkpoints=2", "runner.plot=false"])
    stop = threading.Timer(args.minutes * 60, os.kill, (os.getpid(), signal.SIGTERM))
    stop.daemon = True
    stop.start()
    started = time.monotonic()
    result = train(cfg)
    stop.cancel()
    report = rss_report(result.run_dir, args.warmup)
    restarts = int(result.history[-1]["workers/restarts"]) if result.history else 0
    iterations = len((result.run_dir / "metrics.jsonl").read_text().splitlines())  # the history keeps the last ones
    print(f"soak of {to_dict(cfg)['experiment']['name']} ({cfg.cluster.backend}): {iterations} iterations "
          f"in {(time.monotonic() - started) / 60:.1f} min, {restarts} env-worker restarts survived; {result.run_dir}")
    print(f"{'process':<12} {'MiB after warm-up':>18} {'MiB at the end':>15} {'slope MiB/h':>12}")
    for name, row in report.items():
        print(f"{name:<12} {row['after_warmup']:>18.1f} {row['end']:>15.1f} {row['slope_mib_per_h']:>12.1f}")
    return {"restarts": restarts, "iterations": iterations, "rss": report, "run_dir": str(result.run_dir)}


if __name__ == "__main__":
    main()

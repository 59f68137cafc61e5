"""Soak: a recipe run for a long time with env-worker restarts forced every so often; memory per process.

    .venv/bin/python -m benchmarks.soak configs/reach_mlp_ppo.yaml --minutes 30
    .venv/bin/python -m benchmarks.soak configs/reach_mlp_ppo.yaml --minutes 30 cluster.backend=ray
    .venv/bin/python -m benchmarks.soak configs/pick_color_cnn_ppo.yaml --minutes 30 --restart-every-s 90

The recipe's env is wrapped in ``ChaosEnv``, whose ``step`` raises once every ``--restart-every-s`` seconds
in each process: a transient fault (the exact replay of the epoch passes), so each one is an env-worker
restart and the run goes on as it would have. ``runner.faults.max_worker_restarts`` is lifted (and the backoff and the
broken-env diagnosis, which a fault forced every few seconds in every process would trigger, are off), the run
is stopped ``--minutes`` after its first iteration (SIGTERM: it saves a checkpoint and stops), ``metrics.jsonl`` is read
back: for every ``sys/rss_mib/<worker>`` its value after warm-up, at the end, and its least-squares slope
in MiB per hour over the rows after the first ``--warmup`` fraction of the time; its growth from the ``--settle-min``
mark (10 minutes) to the end; env steps/s and updates/s in the first and the last third of the settled time (their
drift); then the restarts survived. ``soak.png`` in the run dir plots each process's memory and the two rates
against time, the restarts marked. Goal (issue 70): no process grows more than 5% after the settle mark, no drift.
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


RATES = ("env_steps_per_s", "offpolicy/updates_per_s")  # the rates whose drift a soak reports (where logged)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def drift_report(run_dir: Path, settle_s: float) -> dict[str, dict[str, float]]:
    """From ``settle_s`` after the first row on: each process's growth (% from its first settled value to its last)
    and each rate's mean over the first and the last third of that time (``drift``: last / first - 1)."""
    rows = _rows(run_dir)
    if not rows:
        return {}
    start = rows[0]["time"]
    settled = [r for r in rows if r["time"] >= start + settle_s] or rows[-1:]
    report: dict[str, dict[str, float]] = {}
    for key in sorted({k for r in settled for k in r if k.startswith("sys/rss_mib/")}):
        mib = [r[key] for r in settled if key in r]
        report[key] = {"first": mib[0], "last": mib[-1], "growth_pct": 100.0 * (mib[-1] / mib[0] - 1.0)}
    t0, t1 = settled[0]["time"], settled[-1]["time"]
    third = (t1 - t0) / 3
    for key in RATES:
        early = [r[key] for r in settled if key in r and r["time"] <= t0 + third]
        late = [r[key] for r in settled if key in r and r["time"] >= t1 - third]
        if early and late:
            first, last = float(np.mean(early)), float(np.mean(late))
            report[key] = {"first": first, "last": last, "drift_pct": 100.0 * (last / first - 1.0)}
    return report


def plot_soak(run_dir: Path, settle_s: float) -> Path:
    """``soak.png``: each process's memory as growth from its value at the settle mark (the goal's +-5% band drawn),
    and env steps/s and updates/s (each row, and a running mean over 20) against minutes, the restarts marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = _rows(run_dir)
    start = rows[0]["time"]
    minutes = np.array([(r["time"] - start) / 60 for r in rows])
    restarts = np.array([r.get("workers/restarts", 0) for r in rows])
    marks = minutes[1:][np.diff(restarts) > 0]
    fig = Figure(figsize=(15, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    memory = sorted({k for r in rows for k in r if k.startswith("sys/rss_mib/")})
    rates = [key for key in RATES if any(key in r for r in rows)]
    axes = fig.subplots(1, 1 + len(rates))
    settled = next((i for i, m in enumerate(minutes) if m >= settle_s / 60), len(rows) - 1)
    for key in memory:  # growth from the first settled value: a leak of 5% is as visible in a small process
        points = [(m, r[key]) for m, r in zip(minutes, rows) if key in r]
        base = next((r[key] for r in rows[settled:] if key in r), points[-1][1])
        axes[0].plot([m for m, _ in points], [100.0 * (v / base - 1.0) for _, v in points],
                     label=f"{key.removeprefix('sys/rss_mib/')} ({base:,.0f} MiB)", lw=1)
    for bound in (-5.0, 5.0):
        axes[0].axhline(bound, color="red", ls=":", lw=0.8)
    axes[0].set(title="memory, % from the settle mark (red: +-5%)")
    axes[0].legend(fontsize=7)
    for axis, key in zip(axes[1:], rates):
        t = np.array([m for m, r in zip(minutes, rows) if key in r])
        v = np.array([r[key] for r in rows if key in r])
        axis.plot(t, v, lw=0.6, alpha=0.4, label="each iteration")
        if len(v) >= 20:
            axis.plot(t[19:], np.convolve(v, np.ones(20) / 20, mode="valid"), lw=1.6, label="mean of 20")
            axis.legend(fontsize=7)
        axis.set(title=key, ylim=(0, None))
    for axis in axes:
        for m in marks:
            axis.axvline(m, color="grey", lw=0.5, alpha=0.5)
        axis.axvline(settle_s / 60, color="black", ls="--", lw=0.8)
        axis.set(xlabel="minutes (grey: an env-worker restart; dashed: settled)")
    out = run_dir / "soak.png"
    fig.savefig(out, dpi=90)
    return out


def stop_after_running(output_dir: Path, prefix: str, seconds: float, done: threading.Event) -> None:
    """SIGTERM this process ``seconds`` after the run's first iteration was logged, unless ``done`` is set first: a
    soak's minutes are minutes of running, however long start-up took (LIBERO's envs on a loaded machine: minutes)."""
    born = time.time()
    while not done.is_set():  # train() makes the run dir; its metrics.jsonl gets a row per iteration
        if any(p.stat().st_mtime >= born and p.stat().st_size for p in output_dir.glob(f"{prefix}*/metrics.jsonl")):
            if not done.wait(seconds):
                os.kill(os.getpid(), signal.SIGTERM)
            return
        done.wait(0.2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a recipe (YAML)")
    parser.add_argument("overrides", nargs="*", help="section.field=value overrides")
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="how long to run, from the first iteration on (default 30)")
    parser.add_argument("--restart-every-s", type=float, default=60.0,
                        help="seconds between forced env faults in each env worker process (default 60)")
    parser.add_argument("--warmup", type=float, default=0.2, help="fraction of the run left out of the slope")
    parser.add_argument("--settle-min", type=float, default=10.0,
                        help="minutes after which growth and drift are measured (default 10)")
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
    started, done = time.monotonic(), threading.Event()
    threading.Thread(target=stop_after_running, daemon=True,
                     args=(Path(cfg.experiment.output_dir), f"{cfg.experiment.name}-", args.minutes * 60, done)).start()
    try:
        result = train(cfg)
    finally:
        done.set()  # a run that ended on its own is not signalled later
    report = rss_report(result.run_dir, args.warmup)
    restarts = int(result.history[-1]["workers/restarts"]) if result.history else 0
    iterations = len((result.run_dir / "metrics.jsonl").read_text().splitlines())  # the history keeps the last ones
    print(f"soak of {to_dict(cfg)['experiment']['name']} ({cfg.cluster.backend}): {iterations} iterations "
          f"in {(time.monotonic() - started) / 60:.1f} min, {restarts} env-worker restarts survived; {result.run_dir}")
    print(f"{'process':<12} {'MiB after warm-up':>18} {'MiB at the end':>15} {'slope MiB/h':>12}")
    for name, row in report.items():
        print(f"{name:<12} {row['after_warmup']:>18.1f} {row['end']:>15.1f} {row['slope_mib_per_h']:>12.1f}")
    drift = drift_report(result.run_dir, args.settle_min * 60)
    print(f"after {args.settle_min:g} min: growth of each process, drift of each rate (first third -> last third)")
    for key, row in drift.items():
        change = row.get("growth_pct", row.get("drift_pct"))
        print(f"  {key:<32} {row['first']:>10.1f} -> {row['last']:>10.1f}  {change:+6.1f}%")
    print(f"plot: {plot_soak(result.run_dir, args.settle_min * 60)}")
    return {"restarts": restarts, "iterations": iterations, "rss": report, "drift": drift,
            "run_dir": str(result.run_dir)}


if __name__ == "__main__":
    main()

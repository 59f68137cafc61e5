"""Sync against async training on one recipe and seed: throughput, actor use, time to a success target.

    python benchmarks/async_vs_sync.py configs/push_cnn_ppo.yaml --iterations 12 [--target 0.9] [override ...]

Runs the recipe twice in this process (``runner.mode=sync``, then ``runner.mode=async`` with
``algorithm.max_staleness``), both with disaggregated placement, and prints per mode: env-steps/s
over the iterations (from the first iteration's end, so start-up is left out), the actor's share
of that time, the wall-clock (start-up included) and env steps to the first eval at or above
``--target``, beside the ideal overlap (r + u) / max(r, u) from the sync run's median rollout
and update times, and the share of the machine's CPU time that was busy over the iterations: on a
machine whose cores a sync run already keeps busy, async can gain at most 1 / that share, whatever
the ideal overlap says. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import embodied.runs.train as runner
from embodied.config import load_config


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat (NaN where there is none)."""
    try:
        fields = [float(x) for x in open("/proc/stat").readline().split()[1:]]
    except OSError:
        return float("nan"), float("nan")
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def measure(config: str, overrides: list[str], target: float) -> dict[str, float]:
    """One run; per-iteration end times (and the machine's CPU counters) recorded around ``runner.iteration``."""
    ends: list[float] = []
    cpu: list[tuple[float, float]] = []
    original = runner.iteration

    def timed(*args, **kwargs):
        out = original(*args, **kwargs)
        ends.append(time.perf_counter())
        cpu.append(cpu_times())
        return out

    runner.iteration = timed
    try:
        t0 = time.perf_counter()
        result = runner.train(load_config(config, overrides))
    finally:
        runner.iteration = original
    h = result.history
    steps_after_first = h[-1]["env_steps"] - h[0]["env_steps"]
    span = ends[-1] - ends[0]
    reached = next((i for i, m in enumerate(h) if m.get("eval/success_rate", -1) >= target), None)
    return {
        "env_steps_per_s": steps_after_first / span,
        "actor_busy": sum(m["time/update"] for m in h[1:]) / span,
        "rollout_s": statistics.median(m["time/rollout"] for m in h),
        "update_s": statistics.median(m["time/update"] for m in h),
        "time_to_target_s": ends[reached] - t0 if reached is not None else float("nan"),
        "steps_to_target": h[reached]["env_steps"] if reached is not None else float("nan"),
        "final_success": h[-1].get("eval/success_rate", float("nan")),
        "staleness_max": max(m.get("train/staleness_max", 0.0) for m in h),
        "cpu_busy": (cpu[-1][0] - cpu[0][0]) / max(cpu[-1][1] - cpu[0][1], 1e-9),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("overrides", nargs="*")
    ARGS = parser.parse_intermixed_args(argv)  # overrides may follow flags
    out = tempfile.mkdtemp(prefix="async-bench-")
    common = [f"runner.iterations={ARGS.iterations}", f"runner.eval_every={ARGS.eval_every}",
              "runner.checkpoint_every=0", "runner.eval_video=none", "runner.plot=false",
              "logger.backends=[console]", "logger.progress_bar=false", "cluster.placement=disaggregated",
              f"experiment.output_dir={out}", *ARGS.overrides]
    sync = measure(ARGS.config, [*common, "runner.mode=sync"], ARGS.target)
    async_ = measure(ARGS.config, [*common, "runner.mode=async", f"algorithm.max_staleness={ARGS.staleness}"],
                     ARGS.target)
    r, u = sync["rollout_s"], sync["update_s"]
    print(f"\n{ARGS.config}, {ARGS.iterations} iterations, seed from the recipe; sync median rollout {r:.3f} s, "
          f"update {u:.3f} s: ideal overlap (r + u) / max(r, u) = {(r + u) / max(r, u):.2f}x")
    print(f"{'mode':<8}{'env-steps/s':>12}{'actor busy':>12}{'to target (s)':>15}{'steps to target':>17}"
          f"{'final success':>15}{'staleness max':>15}{'CPU busy':>10}")
    for name, m in (("sync", sync), ("async", async_)):
        print(f"{name:<8}{m['env_steps_per_s']:>12.0f}{m['actor_busy']:>12.2f}{m['time_to_target_s']:>15.1f}"
              f"{m['steps_to_target']:>17.0f}{m['final_success']:>15.3f}{m['staleness_max']:>15.0f}"
              f"{m['cpu_busy']:>10.2f}")
    print(f"async / sync throughput: {async_['env_steps_per_s'] / sync['env_steps_per_s']:.2f}x "
          f"(this machine's CPU allows at most {1 / sync['cpu_busy']:.2f}x: sync kept {sync['cpu_busy']:.0%} of it busy)")
    return {"sync": sync, "async": async_}


if __name__ == "__main__":
    main()

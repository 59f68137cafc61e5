"""Chaos, as a test you can rerun: train a recipe while SIGKILLing the run at random moments, resume it each time
with ``runner.resume_from=auto``, and compare the end with an uninterrupted run of the same recipe.

    python benchmarks/chaos.py --recipe configs/reach_mlp_sac.yaml --kills 10 --seed 0 runner.iterations=30

Each kill lands at a moment drawn from ``--seed`` (uniform over the reference run's wall time, so some fall inside a
checkpoint write or a replay save); the run is then started again with ``runner.resume_from=auto`` until it ends.
On the local backend every worker is a thread of the driver, so killing the driver kills them all at once. The
harness prints the kill log and checks, against the uninterrupted run:

- the final policy weights, the learner's state and replay: equal bit for bit;
- the learning metrics of every iteration (``metrics.jsonl`` without times and rates): equal;
- no process of a killed run left behind, no partial checkpoint (``*.tmp*``) on disk, and no more checkpoints than
  ``runner.keep_checkpoints`` (when set).

Exit status 0 when everything holds, 1 otherwise. ``tests/e2e/test_chaos.py`` runs a short version.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch



def timed(key: str) -> bool:
    """Whether a metric is a time, a rate, a process size or a wall-clock share: they differ between any two runs."""
    return key == "time" or key.startswith(("time/", "sys/", "perf/", "busy/")) or key.endswith(("_per_s", "/overlap"))


@dataclass
class ChaosReport:
    """What the chaos run did and what held."""

    kills: list[dict[str, Any]] = field(default_factory=list)  # when each kill landed, and what the run was doing
    failures: list[str] = field(default_factory=list)  # what did not hold
    reference_s: float = 0.0
    chaos_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def train_command(recipe: str, out: Path, overrides: list[str], resume: bool) -> list[str]:
    """``embodied train`` on ``recipe`` into ``out`` (``resume``: ``runner.resume_from=auto``)."""
    return [sys.executable, "-m", "embodied.cli", "train", recipe, *overrides, f"experiment.output_dir={out}",
            "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
            *(["runner.resume_from=auto"] if resume else [])]


def run_to_end(command: list[str], log: Path) -> float:
    """Run ``command`` to its end; its wall time. Raises if it fails."""
    t0 = time.monotonic()
    with log.open("a") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True, env=_env())
    return time.monotonic() - t0


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


def chaos(recipe: str, kills: int, seed: int, out: Path, overrides: list[str]) -> ChaosReport:
    """The reference run, then the run killed ``kills`` times and resumed each time; the comparison."""
    report, rng = ChaosReport(), random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    report.reference_s = run_to_end(train_command(recipe, out / "reference", overrides, False), out / "reference.log")
    t0 = time.monotonic()
    for k in range(kills):
        proc = subprocess.Popen(train_command(recipe, out / "chaos", overrides, True), stdout=(out / "chaos.log").open("a"),
                                stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        delay = rng.uniform(0.4, 1.0) * report.reference_s  # past the start-up, mostly
        try:
            proc.wait(timeout=delay)
            report.kills.append({"kill": k, "after_s": round(delay, 2), "what": "the run had ended already"})
            break
        except subprocess.TimeoutExpired:
            pass
        doing = _what_it_is_doing(out / "chaos")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and anything it started
        proc.wait()
        report.kills.append({"kill": k, "after_s": round(delay, 2), "what": doing})
        left = _survivors(proc.pid)
        if left:
            report.failures.append(f"kill {k}: processes of the killed run still alive: {left}")
    run_to_end(train_command(recipe, out / "chaos", overrides, True), out / "chaos.log")
    report.chaos_s = time.monotonic() - t0
    compare(_only_run(out / "reference"), _finished_run(out / "chaos"), report, overrides)
    return report


def _what_it_is_doing(root: Path) -> str:
    """What the run was at when killed: writing a checkpoint (a temp folder exists) or not, and its newest one."""
    temps = [p.name for p in root.glob("*/checkpoints/*") if ".tmp" in p.name]
    done = sorted(p.name for p in root.glob("*/checkpoints/iter_*") if ".tmp" not in p.name)
    where = f"newest checkpoint {done[-1]}" if done else "no checkpoint yet"
    return f"writing {temps[0]} ({where})" if temps else f"between checkpoints ({where})"


def _survivors(pgid: int) -> list[int]:
    """Processes still in the killed run's process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    found.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return found


def _only_run(root: Path) -> Path:
    [run] = [p for p in root.iterdir() if p.is_dir()]
    return run


def _finished_run(root: Path) -> Path:
    """The run dir that trained to the end (a kill before the first checkpoint leaves a run dir without any)."""
    runs = [p for p in root.iterdir() if p.is_dir() and any((p / "checkpoints").glob("iter_*"))]
    return max(runs, key=lambda p: max(c.name for c in (p / "checkpoints").glob("iter_*")))


def compare(reference: Path, chaotic: Path, report: ChaosReport, overrides: list[str]) -> None:
    """The final checkpoints' policy, learner and replay, the learning metrics, and what is left on disk."""
    from embodied.checkpoint.store import checkpoints_in, find_checkpoint, load_checkpoint

    a, b = (load_checkpoint(find_checkpoint(run)) for run in (reference, chaotic))
    if a["iteration"] != b["iteration"]:
        report.failures.append(f"final iteration {a['iteration']} (reference) vs {b['iteration']}")
    for key in sorted(set(a["actor"]) | set(b["actor"])):
        if key in ("replay_dir", "policy_dir"):
            continue
        if not _equal(a["actor"].get(key), b["actor"].get(key)):
            report.failures.append(f"actor.{key}: differs from the uninterrupted run's")
    replay_a, replay_b = (find_checkpoint(run) / "replay" for run in (reference, chaotic))
    if replay_a.is_dir() and not _same_files(replay_a, replay_b):
        report.failures.append("replay: the final checkpoint's replay files differ")
    rows_a, rows_b = (_learning_rows(run) for run in (reference, chaotic))
    if rows_a != rows_b:
        steps = [s for s in sorted(set(rows_a) | set(rows_b)) if rows_a.get(s) != rows_b.get(s)]
        report.failures.append(f"metrics differ at iterations {steps[:5]}")
    partial = [str(p) for p in chaotic.parent.rglob("*") if ".tmp" in p.name]
    if partial:
        report.failures.append(f"partial checkpoints left: {partial[:3]}")
    keep = next((int(o.split("=")[1]) for o in overrides if o.startswith("runner.keep_checkpoints=")), 0)
    if keep and len(checkpoints_in(chaotic / "checkpoints")) > keep:
        report.failures.append(f"{len(checkpoints_in(chaotic / 'checkpoints'))} checkpoints kept, more than {keep}")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and \
            bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    return names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and \
        all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def _learning_rows(run: Path) -> dict[int, dict[str, Any]]:
    """metrics.jsonl's rows by iteration, without times, rates and process sizes."""
    rows: dict[int, dict[str, Any]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["step"]] = {k: v for k, v in row.items() if not timed(k)}
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", required=True, help="the recipe to train (an off-policy one: replay is compared too)")
    p.add_argument("--kills", type=int, default=10, help="SIGKILLs before the run is let finish")
    p.add_argument("--seed", type=int, default=0, help="draws the moments of the kills")
    p.add_argument("--out", default="runs/chaos", help="where the reference and the chaos runs go")
    p.add_argument("overrides", nargs="*", help="section.field=value overrides for both runs")
    args = p.parse_args(argv)
    report = chaos(args.recipe, args.kills, args.seed, Path(args.out), args.overrides)
    print(f"reference run: {report.reference_s:.1f} s; chaos run with {len(report.kills)} kills: {report.chaos_s:.1f} s")
    for kill in report.kills:
        print(f"  kill {kill['kill']}: after {kill['after_s']} s, {kill['what']}")
    print("identical to the uninterrupted run" if report.ok else "DIFFERS:\n  " + "\n  ".join(report.failures))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Chaos, as a test you can rerun: train a recipe while SIGKILLing the run at random moments, resume it each time
with ``runner.resume_from=auto``, and compare the end with an uninterrupted run of the same recipe.

    python benchmarks/chaos.py --recipe configs/reach_mlp_sac.yaml --kills 10 --seed 0 runner.iterations=30
    python benchmarks/chaos.py --recipe configs/reach_mlp_sac.yaml --kills 10 \
        --targets driver,env_worker,rollout_worker cluster.backend=ray runner.iterations=30

Each kill's target (one of ``--targets``) and moment are drawn from ``--seed``, and the moment is one of the run's
progress, not of the clock: a (re)started run is first let write a new checkpoint, so that its start-up is over;
the kill then waits for a drawn number of further checkpoints (up to 80% of those the reference run wrote after the
run's newest; a worker kill in a run going on at least one, up to 30%), then a drawn share of the run's own last
interval between two checkpoints, so some land inside a checkpoint write or a replay save. The kills land in
training on a fast machine, a quiet one, and one whose load changes during the run alike. After a driver
kill the run is started again with ``runner.resume_from=auto``, as after any run that stopped with an error (a lost
rollout worker stops the run), until it ends. On the local backend every worker is a thread of the driver, so
only the driver can be killed. On Ray, ``env_worker`` and ``rollout_worker`` SIGKILL one of the run's Ray actor
processes of that class (the rank drawn from the seed). The harness prints the kill log and checks, against the
uninterrupted run:

- the final policy weights, the learner's state and replay: equal bit for bit;
- the learning metrics of every iteration (``metrics.jsonl`` without times and rates): equal;
- no process of a killed run left behind (on Ray: the driver's whole process tree, Ray's daemons included, gone
  within ``ORPHAN_GRACE_S``), no partial checkpoint (``*.tmp*``) on disk, and no more checkpoints than
  ``runner.keep_checkpoints`` (when set).

A killed env worker is replaced and the interrupted rollout (or eval) redone from its start, on the same seeds
(docs/running.md, "Stop, resume and faults"), so the run still ends bit for bit as the uninterrupted one; only the
restart counters (``workers/restarts*``) differ, and are left out of the comparison after a worker kill. Two
named exceptions, where the run learns from other episodes than the uninterrupted one: a replay that fails again
(its envs restart from fresh seeds, ``*/episodes_dropped``), and envs that do not pickle (LIBERO's robosuite scenes:
the run warns at its start that checkpoints will not resume exactly, and a resume resets them from a seed). Weights,
replay and metrics are then not compared (``exact`` False, ``inexact`` says why); the run must still end, leave
nothing behind and keep its checkpoints bounded.
"""

from __future__ import annotations

import argparse
import json
import math
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
    startup_s: float = 0.0  # the reference run's start to its first checkpoint
    training_s: float = 0.0  # the reference run's first checkpoint to its last
    chaos_s: float = 0.0
    exact: bool = True  # compared bit for bit (False where the module's docstring names why not)
    inexact: str = ""  # why not


    @property
    def ok(self) -> bool:
        return not self.failures


def train_command(recipe: str, out: Path, overrides: list[str], resume: bool) -> list[str]:
    """``embodied train`` on ``recipe`` into ``out`` (``resume``: ``runner.resume_from=auto``)."""
    return [sys.executable, "-m", "embodied.cli", "train", recipe, *overrides, f"experiment.output_dir={out}",
            "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
            *(["runner.resume_from=auto"] if resume else [])]


def run_to_end(command: list[str], log: Path, checkpoints: Path | None = None) -> tuple[float, float, float, list[str]]:
    """Run ``command`` to its end (raises if it fails): its wall time, when its first and its last checkpoint
    appeared under ``checkpoints`` (a run root; the wall time if none did or none is watched), and the names of
    every checkpoint it wrote (also those it later pruned), oldest first."""
    t0, first, last, seen = time.monotonic(), None, None, set()
    with log.open("a") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_env())
        while proc.poll() is None:
            if checkpoints is not None and not seen.issuperset(now := _checkpoints(checkpoints)):
                seen.update(now)
                last = time.monotonic() - t0
                first = last if first is None else first
            time.sleep(0.05)
    if checkpoints is not None:
        seen.update(_checkpoints(checkpoints))
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command)
    total = time.monotonic() - t0
    return total, total if first is None else first, total if last is None else last, sorted(seen)


class Progress:
    """The checkpoints one process of the chaos run writes under ``root``, with when each appeared: its kills are
    timed by them, so they land in training however fast the machine runs it, and however its load changes."""

    def __init__(self, root: Path, before: set[str] | None = None) -> None:
        """Made before the process starts: what is on disk then (or ``before``) was written by an earlier one."""
        self.root = root
        self.before = set(_checkpoints(root)) if before is None else set(before)
        self.appeared: dict[str, float] = {}  # name -> monotonic time this process's checkpoint was first seen

    def _poll(self) -> None:
        for name in _checkpoints(self.root):
            if name not in self.before and name not in self.appeared:
                self.appeared[name] = time.monotonic()

    def wait_for(self, proc: subprocess.Popen, count: int) -> float:
        """Wait until ``proc`` has written ``count`` more checkpoints, or has ended; the seconds waited."""
        t0 = time.monotonic()
        self._poll()
        target = len(self.appeared) + count
        while proc.poll() is None and len(self.appeared) < target:
            time.sleep(0.05)
            self._poll()
        return time.monotonic() - t0

    def newest(self) -> str | None:
        """The newest checkpoint on disk, this process's or an earlier one's."""
        names = sorted(self.before | set(self.appeared))
        return names[-1] if names else None

    def interval(self, fallback: float) -> float:
        """Seconds between this process's last two checkpoints (``fallback`` until it has written two)."""
        times = sorted(self.appeared.values())
        return times[-1] - times[-2] if len(times) >= 2 else fallback


def kill_point(rng: random.Random, reference: list[str], newest: str | None, fresh: bool) -> tuple[int, float]:
    """Where the next kill lands, drawn from ``rng``: after how many more checkpoints of the run, then after which
    share of an interval between two. ``reference``: the uninterrupted run's checkpoints; ``newest``: the chaos
    run's newest; ``fresh``: the run was just (re)started and has written one since (else a worker kill just hit
    a run going on, which is let write at least one more first)."""
    left = sum(1 for name in reference if newest is None or name > newest)  # checkpoints still to come
    if fresh:
        count = rng.randrange(0, max(1, math.ceil(0.8 * left)))
    else:
        count = 1 + rng.randrange(0, max(1, math.ceil(0.3 * left)))
    return count, rng.random()


def _checkpoints(root: Path) -> list[str]:
    """The finished checkpoints of the runs under ``root``, oldest first (a ``.tmp`` folder is one being written)."""
    return sorted(p.name for p in root.glob("*/checkpoints/iter_*") if ".tmp" not in p.name)


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


TARGETS = ("driver", "env_worker", "rollout_worker")
RAY_ACTORS = {"env_worker": "ray::EnvWorker", "rollout_worker": "ray::MultiStepRolloutWorker"}  # process titles
ORPHAN_GRACE_S = 30.0  # how long a killed driver's processes (Ray's daemons) may take to go


def chaos(recipe: str, kills: int, seed: int, out: Path, overrides: list[str],
          targets: tuple[str, ...] = ("driver",)) -> ChaosReport:
    """The reference run, then the run killed ``kills`` times (each time one of ``targets``) and resumed after each
    kill that stopped it; the comparison."""
    _check_targets(recipe, overrides, targets)
    report, rng = ChaosReport(), random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    report.reference_s, report.startup_s, last, reference = run_to_end(
        train_command(recipe, out / "reference", overrides, False), out / "reference.log", out / "reference")
    report.training_s = last - report.startup_s
    mean_interval = report.training_s / max(1, len(reference) - 1)  # until the chaos run has timed one of its own
    t0, worker_killed = time.monotonic(), False
    proc, progress, stops = None, None, 0
    for k in range(kills):
        target = rng.choice(targets)
        # A kill lands in training, timed by the run's progress: a started (or resumed) run is first let write a
        # new checkpoint (start-up takes most of a short run's wall time, and varies most between machines); then
        # the kill waits for a drawn number of checkpoints and a share of an interval.
        t_kill, fresh = time.monotonic(), proc is None
        if fresh:
            progress = Progress(out / "chaos")
            proc = _start(recipe, out, overrides)
            progress.wait_for(proc, 1)
        count, share = kill_point(rng, reference, progress.newest(), fresh)
        progress.wait_for(proc, count)
        at = progress.newest()
        try:
            proc.wait(timeout=share * progress.interval(mean_interval))
        except subprocess.TimeoutExpired:
            pass
        delay = time.monotonic() - t_kill
        if proc.returncode == 0:
            report.kills.append({"kill": k, "after_s": round(delay, 2), "what": "the run had ended already"})
            break
        if proc.returncode is not None:  # it stopped on its own after the last kill (a lost rollout worker): resume
            stops += 1
            if stops > kills:
                report.failures.append(f"the run stopped {stops} times without being killed (see chaos.log)")
                return report
            report.kills.append({"kill": k, "after_s": round(delay, 2),
                                 "what": f"none: the run had stopped (exit {proc.returncode}) and was resumed"})
            proc = None
            continue
        doing = _what_it_is_doing(out / "chaos")
        if target == "driver":
            tree = _descendants(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and anything of its process group
            proc.wait()
            left = _left_behind(tree)
            if left:
                report.failures.append(f"kill {k}: processes of the killed run still alive after "
                                       f"{ORPHAN_GRACE_S:.0f} s: {left}")
            proc = None
        else:
            victims = _ray_actors(proc, RAY_ACTORS[target])
            if not victims:
                report.kills.append({"kill": k, "after_s": round(delay, 2), "what": f"no {target} process found"})
                continue
            victim = rng.choice(sorted(victims))
            os.kill(victim, signal.SIGKILL)
            worker_killed = True
            doing = f"{target} pid {victim}; {doing}"
        report.kills.append({"kill": k, "after_s": round(delay, 2), "after_checkpoint": at, "target": target,
                             "what": doing})
    if proc is not None:
        proc.wait()
        if proc.returncode != 0:  # stopped by the last worker kill: resume it to the end below
            proc = None
    if proc is None:
        run_to_end(train_command(recipe, out / "chaos", overrides, True), out / "chaos.log")  # the rest, unkilled
    report.chaos_s = time.monotonic() - t0
    finished = _finished_run(out / "chaos")
    dropped = any(v for row in _learning_rows(finished).values() for k, v in row.items()
                  if k.endswith("episodes_dropped"))
    report.inexact = _not_exact(out / "chaos.log") or ("a redone rollout failed again, and its envs restarted from "
                                                       "fresh seeds (episodes_dropped)" if dropped else "")
    report.exact = not report.inexact
    compare(_only_run(out / "reference"), finished, report, overrides, exact=report.exact, restarts=worker_killed)
    return report


def _not_exact(log: Path) -> str:
    """The run's own warning that it cannot resume exactly (envs that do not pickle reset from a seed), if it gave
    one: then a kill's resume starts their episodes anew, and no bit-for-bit comparison can hold."""
    for line in log.read_text(errors="replace").splitlines():
        if "will not resume exactly" in line or "resume is not exact" in line:
            return line.split("UserWarning: ", 1)[-1].strip()
    return ""


def _check_targets(recipe: str, overrides: list[str], targets: tuple[str, ...]) -> None:
    """Refuse a target that is not one, and a worker target on the local backend (its workers are threads)."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise ValueError(f"--targets: {unknown or 'none given'}; choose from {', '.join(TARGETS)}")
    if set(targets) - {"driver"}:
        from embodied.config import load_config

        backend = load_config(recipe, overrides).cluster.backend
        if backend != "ray":
            raise ValueError(f"--targets {','.join(targets)}: cluster.backend is {backend!r}, whose workers are "
                             "threads of the driver; kill workers on cluster.backend=ray")


def _start(recipe: str, out: Path, overrides: list[str]) -> subprocess.Popen:
    return subprocess.Popen(train_command(recipe, out / "chaos", overrides, True), stdout=(out / "chaos.log").open("a"),
                            stderr=subprocess.STDOUT, env=_env(), start_new_session=True)


def _what_it_is_doing(root: Path) -> str:
    """What the run was at when killed: writing a checkpoint (a temp folder exists) or not, and its newest one."""
    temps = [p.name for p in root.glob("*/checkpoints/*") if ".tmp" in p.name]
    done = _checkpoints(root)
    where = f"newest checkpoint {done[-1]}" if done else "no checkpoint yet"
    return f"writing {temps[0]} ({where})" if temps else f"between checkpoints ({where})"


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it now (Ray's daemons and actors, which leave the process group)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _ray_actors(proc: subprocess.Popen, title: str, within_s: float = 5.0) -> list[int]:
    """The processes below ``proc`` titled ``title``, waiting up to ``within_s`` for one (a worker Ray is replacing
    has none for a moment)."""
    deadline = time.monotonic() + within_s
    while True:
        found = [p for p in _descendants(proc.pid) if _cmdline(p).startswith(title)]
        if found or proc.poll() is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _short_command(cmdline: str, width: int = 100) -> str:
    """A command line for a report: the program's file name (not its path, whose length varies by machine), then
    its arguments, cut to ``width`` characters."""
    program, _, args = cmdline.partition(" ")
    return f"{Path(program).name} {args}".strip()[:width]


def _left_behind(tree: list[int]) -> list[str]:
    """The processes of a killed run's tree still alive after ``ORPHAN_GRACE_S`` (then killed, so none piles up)."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.5)
    left = [p for p in tree if _alive(p)]
    named = [f"{p} ({_short_command(_cmdline(p))})" for p in left]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in left):
        time.sleep(0.1)
    return named


def _only_run(root: Path) -> Path:
    [run] = [p for p in root.iterdir() if p.is_dir()]
    return run


def _finished_run(root: Path) -> Path:
    """The run dir that trained to the end (a kill before the first checkpoint leaves a run dir without any)."""
    runs = [p for p in root.iterdir() if p.is_dir() and any((p / "checkpoints").glob("iter_*"))]
    return max(runs, key=lambda p: max(c.name for c in (p / "checkpoints").glob("iter_*")))


def compare(reference: Path, chaotic: Path, report: ChaosReport, overrides: list[str], exact: bool = True,
            restarts: bool = False) -> None:
    """The final checkpoints' policy, learner and replay, the learning metrics (only with ``exact``; without the
    restart counters after worker kills, ``restarts``), and what is left on disk."""
    from embodied.checkpoint.store import find_checkpoint, load_checkpoint

    _check_disk(chaotic, report, overrides)
    a, b = (load_checkpoint(find_checkpoint(run)) for run in (reference, chaotic))
    if a["iteration"] != b["iteration"]:
        report.failures.append(f"final iteration {a['iteration']} (reference) vs {b['iteration']}")
    if not exact:
        return
    for key in sorted(set(a["actor"]) | set(b["actor"])):
        if key in ("replay_dir", "policy_dir"):
            continue
        if not _equal(a["actor"].get(key), b["actor"].get(key)):
            report.failures.append(f"actor.{key}: differs from the uninterrupted run's")
    replay_a, replay_b = (find_checkpoint(run) / "replay" for run in (reference, chaotic))
    if replay_a.is_dir() and not _same_files(replay_a, replay_b):
        report.failures.append("replay: the final checkpoint's replay files differ")
    rows_a, rows_b = (_learning_rows(run, without_restarts=restarts) for run in (reference, chaotic))
    if rows_a != rows_b:
        steps = [s for s in sorted(set(rows_a) | set(rows_b)) if rows_a.get(s) != rows_b.get(s)]
        report.failures.append(f"metrics differ at iterations {steps[:5]}")


def _check_disk(chaotic: Path, report: ChaosReport, overrides: list[str]) -> None:
    """No partial checkpoint left, and no more checkpoints than ``runner.keep_checkpoints``."""
    from embodied.checkpoint.store import checkpoints_in

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


def _learning_rows(run: Path, without_restarts: bool = False) -> dict[int, dict[str, Any]]:
    """metrics.jsonl's rows by iteration, without times, rates and process sizes (and the restart counters)."""
    rows: dict[int, dict[str, Any]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[row["step"]] = {k: v for k, v in row.items()
                             if not timed(k) and not (without_restarts and k.startswith("workers/restarts"))}
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", required=True, help="the recipe to train (an off-policy one: replay is compared too)")
    p.add_argument("--kills", type=int, default=10, help="SIGKILLs before the run is let finish")
    p.add_argument("--seed", type=int, default=0, help="draws the moments of the kills")
    p.add_argument("--targets", default="driver", help=f"what a kill may hit, comma-separated: {', '.join(TARGETS)} "
                   "(workers on cluster.backend=ray only)")
    p.add_argument("--out", default="runs/chaos", help="where the reference and the chaos runs go")
    p.add_argument("overrides", nargs="*", help="section.field=value overrides for both runs")
    args = p.parse_args(argv)
    report = chaos(args.recipe, args.kills, args.seed, Path(args.out), args.overrides,
                   tuple(t for t in args.targets.split(",") if t))
    print(f"reference run: {report.reference_s:.1f} s ({report.startup_s:.1f} s to its first checkpoint, "
          f"{report.training_s:.1f} s from there to its last); "
          f"chaos run with {len(report.kills)} kills: {report.chaos_s:.1f} s")
    for kill in report.kills:
        print(f"  kill {kill['kill']} ({kill.get('target', '-')}): after {kill['after_s']} s, {kill['what']}")
    if not report.ok:
        print("FAILED:\n  " + "\n  ".join(report.failures))
    elif report.exact:
        print("identical to the uninterrupted run")
    else:
        print(f"ended at the same iteration, nothing left behind; not compared bit for bit: {report.inexact}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

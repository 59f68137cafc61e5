"""Evaluation: success rate with a 95% Wilson interval, return and length, a per-task breakdown;
periodic eval during training; and ``embodied eval`` (a checkpoint -> ``eval.json`` and a table).

    report = evaluate_checkpoint(cfg, Path("runs/x/checkpoints/iter_000100"), episodes=64,
                                 out_dir=Path("runs/x/eval/iter_000100"), video=True)
    print(format_table(report))

Eval is greedy (``deterministic=True``) on a fixed set of initial states: episode ``k`` starts
from seed ``experiment.seed + EVAL_SEED_OFFSET + k``, apart from every training seed, so the
same checkpoint gives the same numbers every time. ``embodied eval --sample`` samples the actions
instead, from an RNG seeded by those seeds, so it repeats itself as well.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from embodied.atomic import atomic_path
from embodied.checkpoint import check_env_fits, load_checkpoint
from embodied.config import Config
from embodied.eval_plan import env_eval_episodes
from embodied.placement import ClusterLostError, make_backend
from embodied.preflight import check_policy_fits, preflight
from embodied.types import EpisodeStats
from embodied.workers.evaluator import Evaluator
from embodied.workers.group import Workers

Z_95 = 1.959964  # two-sided 95% normal quantile
PERIODIC_BAR_DELAY_S = 5.0  # a periodic eval shows its bar only once it has run this long


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; stays inside [0, 1] even at 0 or n successes."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class EvalSummary:
    """Statistics of a set of eval episodes."""

    episodes: int
    success_rate: float  # fraction of episodes with success at some step
    success_ci95: tuple[float, float]  # Wilson score interval
    return_mean: float
    return_std: float
    episode_len: float  # mean sub-steps per episode

    @staticmethod
    def of(episodes: list[EpisodeStats]) -> EvalSummary:
        n = len(episodes)
        if n == 0:
            nan = float("nan")
            return EvalSummary(0, nan, (nan, nan), nan, nan, nan)
        successes = sum(e.success_once for e in episodes)
        returns = np.array([e.episode_return for e in episodes])
        return EvalSummary(n, successes / n, wilson_interval(successes, n), float(returns.mean()),
                           float(returns.std()), float(np.mean([e.length for e in episodes])))


def per_task(episodes: list[EpisodeStats]) -> dict[str, EvalSummary]:
    """One summary per task description, in first-seen order."""
    tasks = list(dict.fromkeys(e.task for e in episodes))
    return {t: EvalSummary.of([e for e in episodes if e.task == t]) for t in tasks}


def episode_metrics(prefix: str, episodes: list[EpisodeStats]) -> dict[str, float]:
    """Success rate, mean return and length of finished episodes (NaN when none finished), and how many
    of them the simulator cut short by going unstable."""
    return _summary_metrics(prefix, EvalSummary.of(episodes)) | {
        f"{prefix}/sim_unstable": float(sum(e.sim_unstable for e in episodes))}


def _summary_metrics(prefix: str, s: EvalSummary) -> dict[str, float]:
    return {f"{prefix}/success_rate": s.success_rate, f"{prefix}/return": s.return_mean,
            f"{prefix}/episode_len": s.episode_len, f"{prefix}/episodes": float(s.episodes)}


def eval_metrics(episodes: list[EpisodeStats]) -> dict[str, float]:
    """``eval/*`` metrics: those of ``episode_metrics``, the 95% interval and, with several tasks, each task's."""
    s = EvalSummary.of(episodes)
    metrics = _summary_metrics("eval", s)
    metrics |= {"eval/success_ci_low": s.success_ci95[0], "eval/success_ci_high": s.success_ci95[1]}
    tasks = per_task(episodes)
    if len(tasks) > 1:
        for task, t in tasks.items():
            metrics |= {f"eval/task/{slug(task)}/success_rate": t.success_rate,
                        f"eval/task/{slug(task)}/return": t.return_mean}
    return metrics


def slug(text: str) -> str:
    """A metric-name-safe form of a task description."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "task"


class EvalProgress:
    """A progress bar over an eval's episodes, as training has one over iterations: episodes done of the total,
    success so far and tqdm's ETA. Called with each round's episodes (``Evaluator.run``'s ``progress``): a
    round is ``eval_env.num_envs`` episodes played together, so the bar moves a round at a time.

    ``delay_s``: nothing is shown before the eval has run that long (tqdm's ``delay``), so the evals of a second
    that a training run makes every few iterations print nothing; ``leave``: the bar stays when done.
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, delay_s: float = 0.0, leave: bool = True) -> None:
        self.bar = tqdm(total=total, desc=desc, unit="episode", file=sys.stdout, disable=not enabled, delay=delay_s,
                        leave=leave, dynamic_ncols=True)
        self.successes = 0

    def __call__(self, episodes: list[EpisodeStats]) -> None:
        self.successes += sum(bool(e.success_once) for e in episodes)
        done = self.bar.n + len(episodes)
        if done:
            self.bar.set_postfix(success=f"{self.successes / done:.3f}", refresh=False)
        self.bar.update(len(episodes))

    def __enter__(self) -> EvalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


class PeriodicEval:
    """Eval during training that never stops training.

    An eval env worker that fails is replaced and its round redone within the run's restart rate, which
    training shares (``runner.max_worker_restarts`` within ``runner.restart_window``; see ``Evaluator``);
    an eval that still raises (the rate spent, an env broken in every process) is reported, its episodes
    counted as dropped, and periodic eval is switched off, but training goes on (a hung eval env is left
    behind, never waited on); video problems are reported and the run goes on without them.
    """

    def __init__(self, workers: Workers, cfg: Config, run_dir: Path) -> None:
        self.workers, self.cfg, self.run_dir = workers, cfg, run_dir
        self.failed = False

    def __call__(self, iteration: int) -> dict[str, float]:
        """``eval/*`` metrics of the weights just trained ({} once eval has failed)."""
        if self.failed:
            return {}
        n = self.cfg.runner.eval_episodes
        video_dir = str(self.run_dir / "videos" / f"iter_{iteration:06d}") if self.records(iteration) else None
        t0 = time.perf_counter()
        self.workers.evaluator.iteration = iteration  # labels a restart of an eval env worker
        actor, wait = self.workers.actor_group, self.workers.backend.wait
        try:
            wait(actor.call("use_average", True))  # actor.ema_decay: eval the average (else a no-op)
            try:
                self.workers.sync_weights()
                with self.progress_bar(iteration, n) as progress:
                    episodes = [e for e in self.workers.evaluator.run(n, video_dir, progress=progress)
                                if e.env_index < n]
            finally:
                wait(actor.call("use_average", False))  # the next iteration publishes the live weights again
        except ClusterLostError:
            raise  # the run stops (embodied.runner says where it can go on from)
        except Exception as exc:  # noqa: BLE001 - training goes on without eval (also when the restart rate is spent)
            warnings.warn(f"eval at iteration {iteration} failed, periodic eval switched off: {type(exc).__name__}: "
                          f"{exc}", stacklevel=2)
            self.failed = True
            return {"eval/failed": 1.0, "eval/episodes_dropped": float(n)}  # none of its episodes has a result
        dropped = len(self.workers.evaluator.dropped)  # left out: their env's fault replayed (Evaluator.run)
        return eval_metrics(episodes) | {"eval/episodes_dropped": float(dropped), "time/eval": time.perf_counter() - t0}

    def progress_bar(self, iteration: int, episodes: int) -> EvalProgress:
        """The eval's bar under training's own (console logger with its bar on), shown once it takes seconds."""
        shown = self.cfg.logger.progress_bar and "console" in self.cfg.logger.backends
        return EvalProgress(episodes, f"eval @ it {iteration}", shown, PERIODIC_BAR_DELAY_S, leave=False)

    def records(self, iteration: int) -> bool:
        """Whether the eval at ``iteration`` records videos (``runner.eval_video``)."""
        mode = self.cfg.runner.eval_video
        return mode == "all" or (mode == "last" and iteration == self.cfg.runner.iterations)

    def videos(self, wait: bool = False) -> dict[str, Path]:
        """Videos finished since the last call, keyed ``eval/video/<name>`` for the logger.

        Keys stay the same from eval to eval (wandb shows one panel with a step slider); should two
        evals' videos finish together, the later eval's wins (the files of both stay on disk).
        """
        if self.cfg.runner.eval_video == "none" or self.failed:
            return {}
        try:
            report = self.workers.evaluator.take_videos(wait)
        except Exception as exc:  # noqa: BLE001
            report_errors([f"collecting eval videos failed: {exc!r}"])
            return {}
        report_errors(report.errors)
        return {f"eval/video/{p.stem}": p for p in sorted(Path(p) for p in report.paths)}


def report_errors(errors: list[str]) -> None:
    for error in errors:
        warnings.warn(error, stacklevel=2)


# -- embodied eval ------------------------------------------------------------------------------


@dataclass
class EvalReport:
    """What ``embodied eval`` measured; ``to_json`` is the content of ``eval.json``."""

    checkpoint: str
    iteration: int  # training iteration the checkpoint was saved at
    env_id: str
    seeds: list[int]  # the reset seed of each episode, in episode order
    summary: EvalSummary
    tasks: dict[str, EvalSummary]
    episodes: list[EpisodeStats]
    videos: list[str] = field(default_factory=list)
    deterministic: bool = True  # greedy actions; False: sampled (``embodied eval --sample``)
    # Per episode, the reset options of a suite's fixed eval set (e.g. {"task_id": 3, "init_state": 17}), else None.
    options: list[dict[str, Any] | None] = field(default_factory=list)
    # What can move the numbers: the eval env's own provenance (versions, GL renderer, image size,
    # settle and max steps for LIBERO) and the framework's stack.
    provenance: dict[str, Any] = field(default_factory=dict)
    # Eval episode indices left out: their env worker hit the same fault on the redo of their round (a
    # deterministic bug of the env from that initial state), so they have no result. Not counted as failures.
    dropped: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        options = self.options or [None] * len(self.episodes)
        return {
            "checkpoint": self.checkpoint, "iteration": self.iteration, "env_id": self.env_id,
            "deterministic": self.deterministic, "num_episodes": self.summary.episodes,
            **{k: v for k, v in asdict(self.summary).items() if k != "episodes"},
            "per_task": {t: asdict(s) for t, s in self.tasks.items()},
            "videos": self.videos,
            "provenance": self.provenance,
            "episodes_dropped": self.dropped,
            "episodes": [{"episode": e.env_index, "seed": seed, "task": e.task, "return": e.episode_return,
                          "length": e.length, "success": e.success_once, "success_at_end": e.success_at_end,
                          **(opts or {})}
                         for e, seed, opts in zip(self.episodes, self.seeds, options)],
        }


def evaluate_checkpoint(cfg: Config, checkpoint: Path, episodes: int | None, out_dir: Path,
                        video: bool = False, sample: bool = False) -> EvalReport:
    """Greedy eval of a checkpoint's policy on ``cfg``'s eval envs; writes ``out_dir/eval.json``.

    ``episodes``: how many (None: the env's whole fixed eval set when it publishes one, e.g. LIBERO's
    tasks x 50 init states, else ``runner.eval_episodes``); for a fixed set, spread evenly over it.

    ``sample``: the policy samples its actions, as in training rollouts (reproducibly: the RNG is
    seeded from the eval seeds). RL improves the sampled policy first; this measures it.
    """
    if cfg.env.preflight:  # check-env's fast checks on one eval env, before any worker starts
        preflight(cfg.resolved_eval_env(), "eval_env", video)
    check_policy_fits(cfg, cfg.resolved_eval_env(), "eval_env")
    state = load_checkpoint(checkpoint)
    env_id = cfg.resolved_eval_env().id
    check_env_fits(state, env_id, None, f"checkpoint {checkpoint}")  # before any worker starts
    fixed = env_eval_episodes(cfg.resolved_eval_env())
    if episodes is None:
        episodes = len(fixed) if fixed is not None else cfg.runner.eval_episodes
    torch.manual_seed(cfg.experiment.seed)
    backend = make_backend(cfg.cluster)
    try:
        evaluator = Evaluator.start(cfg, backend, cfg.logger.video if video else None)
        check_env_fits(state, env_id, backend.wait(evaluator.envs.group.call("spec"))[0], f"checkpoint {checkpoint}")
        try:
            evaluator.load_checkpoint(state["actor"], int(state["actor"].get("version", 0)))
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"checkpoint {checkpoint} does not fit policy config {cfg.policy}: {exc}") from None
        plan = evaluator.plan(episodes)
        with EvalProgress(episodes, "eval", cfg.logger.progress_bar) as progress:
            found = evaluator.run(episodes, str(out_dir / "videos") if video else None, sample, progress)
        provenance = evaluator.provenance()
        videos = evaluator.take_videos(wait=True)
        report_errors(videos.errors)
        evaluator.close()
    finally:
        backend.shutdown()
    result = EvalReport(str(checkpoint), int(state.get("iteration", 0)), cfg.resolved_eval_env().id,
                        [evaluator.eval_seed(e.env_index) for e in found], EvalSummary.of(found), per_task(found),
                        found, sorted(videos.paths), deterministic=not sample,
                        options=[plan.options_of(e.env_index) for e in found], provenance=provenance,
                        dropped=list(evaluator.dropped))
    write_json(out_dir / "eval.json", result.to_json())
    return result


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (temp file, then rename)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")


def format_table(report: EvalReport) -> str:
    """The report as a plain-text table: one row per task, then all episodes."""
    rows = [("task", "episodes", "success", "95% CI", "return", "length")]
    summaries = list(report.tasks.items()) if len(report.tasks) > 1 else []
    for name, s in [*summaries, ("all", report.summary)]:
        rows.append((name[:90] or "(none)", str(s.episodes), f"{s.success_rate:.3f}",
                     f"[{s.success_ci95[0]:.3f}, {s.success_ci95[1]:.3f}]", f"{s.return_mean:.3f}",
                     f"{s.episode_len:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    seeds = f"seeds {report.seeds[0]}..{report.seeds[-1]}" if report.seeds else "no episodes"
    if any(o is not None for o in report.options):  # a suite's fixed eval set: the options, not the seeds, start them
        seeds = f"{len(report.episodes)} episodes of the env's fixed eval set (eval.json lists each one's options)"
    head = f"eval of {report.checkpoint} (iteration {report.iteration}) on {report.env_id}, "
    head += f"{'greedy' if report.deterministic else 'sampled'}, {seeds}"
    tail = []
    if report.dropped:
        tail = [f"{len(report.dropped)} episode(s) left out, not counted as failures: their env raised the same error "
                f"again on the redo (a bug of the env from that initial state): episodes {report.dropped}"]
    return "\n".join([head, lines[0], "-" * len(lines[0]), *lines[1:], *tail])

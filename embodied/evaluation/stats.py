"""What an eval measured: success rate with a 95% Wilson interval, return and length, a per-task breakdown,
the metrics a run logs of them, and ``embodied eval``'s report (``eval.json`` and its table).

The eval itself (which episodes, from which initial states, by which workers) is ``embodied.evaluation.run``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.core.atomic import atomic_path
from embodied.core.types import EpisodeStats


Z_95 = 1.959964  # two-sided 95% normal quantile


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
    of them the simulator cut short by going unstable; with an env mixture, the same of each member that finished
    episodes, as ``<prefix>/<env id>/*``, beside the pooled figures."""
    metrics = _summary_metrics(prefix, EvalSummary.of(episodes)) | {
        f"{prefix}/sim_unstable": float(sum(e.sim_unstable for e in episodes))}
    for env_id, mine in per_member(episodes).items():
        metrics |= _summary_metrics(f"{prefix}/{env_id}", EvalSummary.of(mine))
    return metrics


def per_member(episodes: list[EpisodeStats]) -> dict[str, list[EpisodeStats]]:
    """The episodes of each env mixture member, in first-seen order ({} outside a mixture)."""
    members: dict[str, list[EpisodeStats]] = {}
    for e in episodes:
        if e.env_id:
            members.setdefault(e.env_id, []).append(e)
    return members


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

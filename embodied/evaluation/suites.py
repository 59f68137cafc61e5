"""Several suites in one eval: which env ids a ``--suites`` list names, one row per suite x perturbation
axis (success with its Wilson interval, episodes, mean length, the drop from the base suite), the table,
``eval.json``'s summary and the bar plot. No simulator and no worker here (the runs are
``embodied.evaluation.multi``).

    ids = expand_suites("LIBERO-Object-v0,libero-pro-object")        # named sets stand for their lists
    rows = suite_rows({"LIBERO-Object-v0": eps0, "LIBERO-Object-Swap-v0": eps1})
    print(format_suite_table(rows))

An env class says which suite it perturbs with ``suite_axis() -> (base env id, axis)``; an env that does not is
its own base suite (axis ``base``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied.config import Config
from embodied.core.atomic import atomic_path
from embodied.core.registry import ENV_SETS, ENVS
from embodied.core.types import EpisodeStats
from embodied.evaluation.stats import EvalSummary

BASE_AXIS = "base"


def expand_suites(text: str | list[str]) -> list[str]:
    """The env ids of a comma-separated list (or a list) in order, each once; a named set (``ENV_SETS``, e.g.
    ``libero-pro-object``) stands for its ids. An unknown name raises ``UnknownNameError`` naming the known
    ids and sets."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise ValueError("no suite named: give env ids or named sets, comma-separated")
    ids: list[str] = []
    for name in names:
        if name in ENV_SETS:
            ids += list(ENV_SETS.resolve(name))
            continue
        try:
            ENVS.entry_point(name)
        except KeyError as err:
            raise type(err)(f"{err} Named sets: {', '.join(ENV_SETS.names()) or '(none)'}.") from None
        ids.append(name)
    return list(dict.fromkeys(ids))


def suite_config(cfg: Config, env_id: str) -> Config:
    """``cfg`` evaluating ``env_id``: the eval env's id replaced, with the env class's own episode cap if it
    declares one (``default_max_episode_steps``), else the config's."""
    cap = getattr(ENVS.resolve(env_id), "default_max_episode_steps", None)
    steps = cap() if callable(cap) else cfg.eval_env.max_episode_steps
    return dataclasses.replace(cfg, eval_env=dataclasses.replace(cfg.eval_env, id=env_id, max_episode_steps=steps))


def suite_axis(env_id: str) -> tuple[str, str]:
    """``(base suite id, axis)`` of an env id: its class's ``suite_axis()``, else ``(env_id, "base")``."""
    target = ENVS.resolve(env_id)
    own = getattr(target, "suite_axis", None)
    return tuple(own()) if callable(own) else (env_id, BASE_AXIS)  # type: ignore[return-value]


@dataclass
class SuiteRow:
    """One suite x axis of a generalization table."""

    env_id: str
    base: str  # the base suite's env id (itself for a base suite)
    axis: str  # the perturbation ("base" for the base suite)
    summary: EvalSummary
    drop: float | None = None  # base suite's success minus this one's (None: the base suite was not evaluated)

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {"env_id": self.env_id, "base": self.base, "axis": self.axis, "episodes": s.episodes,
                "success_rate": s.success_rate, "success_ci95": list(s.success_ci95), "episode_len": s.episode_len,
                "return_mean": s.return_mean, "drop_from_base": self.drop}


def suite_rows(results: dict[str, list[EpisodeStats]], axes: dict[str, tuple[str, str]] | None = None) -> list[SuiteRow]:
    """A row per suite (in ``results``' order): ``axes`` maps an env id to ``(base, axis)`` (default: asked of its
    class); the drop is from the base suite's success when the base suite is among ``results``."""
    axes = axes or {env_id: suite_axis(env_id) for env_id in results}
    rows = [SuiteRow(env_id, *axes[env_id], EvalSummary.of(episodes)) for env_id, episodes in results.items()]
    base_rate = {r.env_id: r.summary.success_rate for r in rows if r.axis == BASE_AXIS}
    return [dataclasses.replace(r, drop=base_rate[r.base] - r.summary.success_rate) if r.base in base_rate else r
            for r in rows]


def format_suite_table(rows: list[SuiteRow], skipped: dict[str, str] | None = None) -> str:
    """The rows as a fixed-width table, then the suites left out and why."""
    head = ("suite", "axis", "episodes", "success", "95% CI", "mean length", "drop from base")
    lines = [head]
    for r in rows:
        s = r.summary
        drop = "-" if r.drop is None or r.axis == BASE_AXIS else f"{r.drop:+.3f}"
        lines.append((r.env_id, r.axis, str(s.episodes), f"{s.success_rate:.3f}",
                      f"[{s.success_ci95[0]:.3f}, {s.success_ci95[1]:.3f}]", f"{s.episode_len:.1f}", drop))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in lines]
    text.insert(1, "-" * len(text[0]))
    text += [f"not evaluated: {env_id}: {why}" for env_id, why in (skipped or {}).items()]
    return "\n".join(text)


def episode_records(env_id: str, axis: str, report_json: dict[str, Any]) -> list[dict[str, Any]]:
    """A suite's per-episode records from its ``eval.json``, each with its suite and axis (task and init state,
    where the suite has a fixed eval set, are already there)."""
    return [{"suite": env_id, "axis": axis, **e} for e in report_json.get("episodes", [])]


def plot_suites(rows: list[SuiteRow], out: Path, title: str = "") -> Path:
    """Bars of success per suite x axis with their 95% intervals into ``out`` (png); returns it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.5 * len(rows) + 2), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    rates = [r.summary.success_rate for r in rows]
    low = [max(0.0, rate - r.summary.success_ci95[0]) for rate, r in zip(rates, rows)]
    high = [max(0.0, r.summary.success_ci95[1] - rate) for rate, r in zip(rates, rows)]
    colors = ["tab:gray" if r.axis == BASE_AXIS else "tab:blue" for r in rows]
    ax.bar(range(len(rows)), rates, yerr=[low, high], capsize=3, color=colors)
    ax.set_xticks(range(len(rows)), [r.env_id.removesuffix("-v0") for r in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success (95% Wilson interval)")
    ax.set_title(title or "success per suite and axis")
    ax.grid(axis="y", alpha=0.3)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return out

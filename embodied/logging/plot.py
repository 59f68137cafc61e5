"""Learning curves of a run: ``metrics.jsonl`` -> ``<run_dir>/learning_curves.png``.

    embodied plot runs/reach_mlp_ppo-20250101-120000
    embodied plot runs/a runs/b --out compare.png       # several runs: their evals side by side

Six panels against env steps: success rate (training episodes, eval with its 95% interval, and each
``runner.extra_evals`` env as ``eval/<env id>/success_rate``),
return, episode length, policy loss, value loss and env-steps/s. The loss panels read whatever learner
logged, by the metric's name: ``<prefix>/policy_loss``, ``<prefix>/train_loss`` and ``<prefix>/val_loss`` are
policy losses, ``<prefix>/value_loss`` and ``<prefix>/q_loss`` value losses (the prefix is the learner's own),
so an algorithm added as a plug-in is drawn when it names its metrics so. Rendered with matplotlib's Agg
canvas directly, so no GUI backend is touched and the global backend stays as it was.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from embodied.core.atomic import atomic_path

PLOT_FILE = "learning_curves.png"


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]  # one line each; eval/* keys are drawn with markers; "*/name": every prefix's "name"
    band: tuple[str, str] | None = None  # (low, high) keys shaded around the eval line
    ylim: tuple[float, float] | None = None


PANELS = (
    Panel("success rate", ("env/success_rate", "eval/success_rate"), ("eval/success_ci_low", "eval/success_ci_high"),
          (-0.02, 1.02)),
    Panel("return", ("env/return", "eval/return")),
    Panel("episode length", ("env/episode_len", "eval/episode_len")),
    Panel("policy loss", ("*/policy_loss", "*/train_loss", "*/val_loss")),
    Panel("value loss", ("*/value_loss", "*/q_loss")),
    Panel("env steps / s", ("env_steps_per_s",)),
)


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The rows of a ``metrics.jsonl`` (a torn last line, from a crash, is skipped)."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def series(rows: list[dict[str, float]], key: str, start: float | None = None) -> tuple[list[float], list[float]]:
    """(env steps, values) of the rows where ``key`` is finite; with ``start`` (a wall-clock time, seconds since the
    epoch) the x values are minutes since it instead, from each row's ``time``."""
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            if start is not None:
                if "time" not in row:  # a row written before metrics carried their time
                    continue
                xs.append((row["time"] - start) / 60)
            else:
                xs.append(row.get("env_steps", row.get("step", len(xs))))
            ys.append(value)
    return xs, ys


def run_start(run_dir: Path, rows: list[dict[str, float]]) -> float:
    """When the run began: its ``config.yaml`` is written as the run dir is made, before any worker starts. A resume
    writes it again, so the first metrics row bounds it too (its time less its iteration's): a resumed run keeps
    the first start, and its curve includes the pause."""
    config = run_dir / "config.yaml"
    starts = [config.stat().st_mtime] if config.is_file() else []
    if rows and "time" in rows[0]:
        starts.append(rows[0]["time"] - rows[0].get("time/iteration", 0.0))
    return min(starts, default=0.0)


def plot_run(run_dir: str | Path) -> Path:
    """Draw the learning curves of ``run_dir`` into ``run_dir/learning_curves.png``; returns its path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics} does not exist (is {run_dir} a run directory?)")
    rows = read_metrics(metrics)
    if not rows:
        raise ValueError(f"{metrics} holds no metrics yet")
    fig = Figure(figsize=(15, 8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    for ax, panel in zip(axes.flat, PANELS):
        _draw(ax, rows, panel)
    for key in extra_eval_keys(rows):  # runner.extra_evals: one more line each in the success panel
        xs, ys = series(rows, key)
        axes.flat[0].plot(xs, ys, marker="s", markersize=3, linestyle="--", label=key.split("/")[1])
    if extra_eval_keys(rows):
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(run_dir.name)
    out = run_dir / PLOT_FILE
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return out


def plot_compare(run_dirs: list[str | Path], out: str | Path, baselines: list[str | Path] = ()) -> Path:
    """Eval success (with its 95% interval) against env steps and against wall-clock, and eval return against env
    steps, of several runs, one line per run labelled by its folder name, into ``out``; returns its path.

    ``baselines``: ``eval.json`` files (from ``embodied eval``, e.g. of the SFT checkpoint RL started
    from), each drawn as a dashed level labelled with its checkpoint's run and its success rate.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = []
    for run_dir in map(Path, run_dirs):
        metrics = run_dir / "metrics.jsonl"
        if not metrics.is_file():
            raise FileNotFoundError(f"{metrics} does not exist (is {run_dir} a run directory?)")
        rows = read_metrics(metrics)
        if not series(rows, "eval/success_rate")[0]:
            raise ValueError(f"{metrics} holds no eval rows (eval/success_rate) to compare")
        runs.append((run_dir.name, rows, run_start(run_dir, rows)))
    levels = []
    for path in map(Path, baselines):
        try:
            report = json.loads(path.read_text())
            checkpoint = Path(report["checkpoint"])
            levels.append((f"{checkpoint.parent.parent.name}/{checkpoint.name}", float(report["success_rate"]),
                           float(report["return_mean"])))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not an eval.json of `embodied eval` ({exc!r})") from None
    fig = Figure(figsize=(17, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    success, clock, ret = fig.subplots(1, 3)
    for name, rows, start in runs:
        for ax, t0 in ((success, None), (clock, start)):
            xs, ys = series(rows, "eval/success_rate", t0)
            line, = ax.plot(xs, ys, marker="o", markersize=4, label=name)
            lo, hi = (series(rows, k, t0)[1] for k in ("eval/success_ci_low", "eval/success_ci_high"))
            if len(lo) == len(xs) == len(hi):
                ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
        ret.plot(*series(rows, "eval/return"), marker="o", markersize=4, label=name)
    for name, rate, mean_return in levels:
        for ax in (success, clock):
            ax.axhline(rate, linestyle="--", color="gray", label=f"{name}: {rate:.1%}")
        ret.axhline(mean_return, linestyle="--", color="gray", label=name)
    steps = "env steps" if all(any("env_steps" in r for r in rows) for _, rows, _ in runs) else "step"
    for ax, title, xlabel in ((success, "eval success rate (95% CI)", steps),
                              (clock, "eval success rate against wall-clock", "minutes since the run began"),
                              (ret, "eval return", steps)):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    clock.set_ylim(-0.02, 1.02)
    success.set_ylim(-0.02, 1.02)
    out = Path(out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return out


def extra_eval_keys(rows: list[dict[str, float]]) -> list[str]:
    """``eval/<env id>/success_rate`` keys of ``runner.extra_evals`` in the rows (not ``eval/task/<task>/...``)."""
    keys = {k for row in rows for k in row if k.startswith("eval/") and k.endswith("/success_rate")}
    return sorted(k for k in keys if k.count("/") == 2 and not k.startswith("eval/task/"))


def panel_keys(rows: list[dict[str, float]], panel: Panel) -> list[str]:
    """The metric keys ``panel`` draws: its keys, a ``*/name`` one standing for every ``<prefix>/name`` in the rows
    (one level, never ``eval/``: those are the eval's own)."""
    present = sorted({k for row in rows for k in row if k.count("/") == 1 and not k.startswith("eval/")})
    keys = []
    for key in panel.keys:
        if key.startswith("*/"):
            keys += [k for k in present if k.split("/")[1] == key[2:] and k not in keys]
        elif key not in keys:
            keys.append(key)
    return keys


def _draw(ax, rows: list[dict[str, float]], panel: Panel) -> None:
    keys = [k for k in panel_keys(rows, panel) if series(rows, k)[0]]
    prefixes = [k.split("/")[0] for k in keys]
    for key in keys:
        xs, ys = series(rows, key)
        is_eval = key.startswith("eval/")
        # A line is named by its prefix (train, eval, sac, ...); by its whole key where two share one (sft train/val)
        prefix = key.split("/")[0]
        label = key.replace("/", " ").replace("_loss", "") if prefixes.count(prefix) > 1 else prefix
        ax.plot(xs, ys, marker="o" if is_eval else None, markersize=4, label=label)
        if is_eval and panel.band is not None:
            lo, hi = (series(rows, k)[1] for k in panel.band)
            if len(lo) == len(xs) == len(hi):
                ax.fill_between(xs, lo, hi, alpha=0.2, label="eval 95% CI")
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    ax.set_title(panel.title)
    ax.set_xlabel("env steps" if any("env_steps" in row for row in rows) else "step")  # SFT: gradient steps
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")

"""Several checkpoints' ``embodied eval --suites`` results side by side: one markdown table (success with its 95%
Wilson interval per suite) and one grouped bar plot.

    python benchmarks/suites_compare.py SFT=runs/x/eval/sft-suites DAgger=runs/y/eval/dagger-suites \
        --out docs/results/generalization/robust.png --goal LIBERO-Object-Swap-v0,LIBERO-Object-TempX0.1-v0,...

Each ``NAME=DIR`` is a ``--suites`` output folder (one ``<suite>/eval.json`` per suite, as ``embodied eval``
writes them). ``--goal`` names suites whose mean the table adds as a last row (e.g. the axes a goal is set on).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def read(folder: Path) -> dict[str, dict]:
    """Suite id -> its eval.json, for every suite evaluated in ``folder``."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(folder.glob("*/eval.json"))}


def table(runs: dict[str, dict[str, dict]], goal: list[str]) -> str:
    suites = list(dict.fromkeys(s for r in runs.values() for s in r))
    lines = ["| suite | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for suite in suites:
        cells = []
        for r in runs.values():
            e = r.get(suite)
            cells.append("-" if e is None else f"{e['success_rate']:.2f} [{e['success_ci95'][0]:.2f}, "
                                               f"{e['success_ci95'][1]:.2f}] ({e['num_episodes']})")
        lines.append(f"| {suite.removesuffix('-v0')} | " + " | ".join(cells) + " |")
    if goal:
        means = []
        for r in runs.values():
            found = [r[s]["success_rate"] for s in goal if s in r]
            means.append(f"**{sum(found) / len(found):.3f}** ({len(found)} suites)" if found else "-")
        lines.append("| mean over the goal's axes | " + " | ".join(means) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[str, dict]], out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    suites = list(dict.fromkeys(s for r in runs.values() for s in r))
    fig = Figure(figsize=(max(7.0, 0.8 * len(suites) + 2), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / len(runs)
    for k, (name, r) in enumerate(runs.items()):
        xs = [i + (k - (len(runs) - 1) / 2) * width for i, s in enumerate(suites) if s in r]
        rates = [r[s]["success_rate"] for s in suites if s in r]
        err = [[max(0.0, r[s]["success_rate"] - r[s]["success_ci95"][0]) for s in suites if s in r],
               [max(0.0, r[s]["success_ci95"][1] - r[s]["success_rate"]) for s in suites if s in r]]
        ax.bar(xs, rates, width, yerr=err, capsize=2, label=name)
    ax.set_xticks(range(len(suites)), [s.removesuffix("-v0").removeprefix("LIBERO-") for s in suites], rotation=50,
                  ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("greedy success (95% Wilson interval)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="NAME=DIR: a --suites output folder")
    parser.add_argument("--out", type=Path, help="the plot (png)")
    parser.add_argument("--goal", default="", help="comma-separated suite ids whose mean the table adds")
    args = parser.parse_args(argv)
    runs = {name: read(Path(folder)) for name, _, folder in (r.partition("=") for r in args.runs)}
    text = table(runs, [g for g in args.goal.split(",") if g])
    print(text)
    if args.out:
        plot(runs, args.out)
        print(f"plot: {args.out}")
    return text


if __name__ == "__main__":
    main()

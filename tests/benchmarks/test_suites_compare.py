"""The side-by-side table of several --suites evals: rows per suite, the goal's mean, and the plot."""

from __future__ import annotations

import json

from benchmarks.suites_compare import main


def write(folder, rates):
    for suite, rate in rates.items():
        (folder / suite).mkdir(parents=True)
        (folder / suite / "eval.json").write_text(json.dumps(
            {"success_rate": rate, "success_ci95": [rate / 2, (1 + rate) / 2], "num_episodes": 10}))


def test_two_runs_side_by_side_with_the_goals_mean(tmp_path):
    write(tmp_path / "a", {"X-v0": 1.0, "X-Swap-v0": 0.5})
    write(tmp_path / "b", {"X-v0": 0.9, "X-Swap-v0": 0.7})
    text = main([f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--goal", "X-Swap-v0", "--out", str(tmp_path / "p.png")])
    assert "| X-Swap | 0.50 [0.25, 0.75] (10) | 0.70 [0.35, 0.85] (10) |" in text
    assert "| mean over the goal's axes | **0.500** (1 suites) | **0.700** (1 suites) |" in text
    assert (tmp_path / "p.png").stat().st_size > 0

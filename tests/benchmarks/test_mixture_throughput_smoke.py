"""The mixture-throughput benchmark runs end to end on two built-in tasks (no timing assertions)."""

from __future__ import annotations

import math

from benchmarks.mixture_throughput import main


def test_the_mixture_benchmark_steps_one_env_and_the_mixture_in_turn(capsys):
    figures = main(["--members", "Push-v0,PickPlace-v0", "--obs-mode", "state", "--kwargs", "{}", "--chunks", "5",
                    "--rounds", "2", "--num-envs", "2"])
    assert set(figures) == {"Push-v0", "PickPlace-v0", "mixture", "expected", "ratio"}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    assert "mixture / that" in capsys.readouterr().out

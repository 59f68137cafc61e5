"""The π0 throughput benchmark runs end to end at toy batches (no timing assertions)."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.pi0_throughput import main


@pytest.mark.filterwarnings("ignore:policy.type=pi0")
def test_quick_run_prints_act_evaluate_and_ppo_rows(capsys):
    threads = torch.get_num_threads()
    try:
        result = main(["--repeats", "1", "--threads", "1", "--act-batches", "2", "--ppo-batches", "2"])
    finally:
        torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert "PI0Policy" in text and "sample_actions" in text and "PPO step" in text
    assert [r[0] for r in result["act"]] == [2] and [r[0] for r in result["ppo"]] == [2]
    assert all(math.isfinite(v) and v > 0 for row in result["act"] + result["evaluate"] for v in row[1:])
    assert result["ppo"][0][2] < 1e-4  # evaluate replays act: the first ratio is 1

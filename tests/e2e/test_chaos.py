"""``benchmarks/chaos.py`` in short: Reach SAC SIGKILLed at random moments and resumed each time ends exactly where
the uninterrupted run does (weights, learner, replay, learning metrics), with no process or partial checkpoint
left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos import chaos

pytestmark = pytest.mark.slow


def test_a_run_killed_three_times_ends_as_the_uninterrupted_one(tmp_path):
    report = chaos(str(Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"), kills=3, seed=0, out=tmp_path, overrides=[
        "runner.iterations=12", "runner.checkpoint_every=1", "runner.keep_checkpoints=2", "runner.eval_every=6",
        "runner.eval_episodes=8", "eval_env.num_envs=8", "algorithm.learning_starts=64", "algorithm.batch_size=64"])
    assert report.ok, report.failures
    assert len(report.kills) >= 1
    resumed = (tmp_path / "chaos.log").read_text().count("runner.resume_from=auto: continuing")
    assert resumed >= 1, report.kills  # at least one kill landed after a checkpoint, and the run went on from it

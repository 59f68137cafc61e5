"""configs/pick_place_mlp_dagger.yaml for real, shortened: scripted PickPlace episodes collected, then DAgger
iterations in which the policy acts and the scripted expert labels every state it visits; SFT on the same
episodes; and a resume that continues the run's replay of labels."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from embodied.config import load_config
from embodied.data import DemoDataset
from embodied.runs.collect import collect
from embodied.runs.sft import sft
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "pick_place_mlp_dagger.yaml"
SMALL = ["env.num_envs=4", "eval_env.num_envs=4", "runner.eval_episodes=4", "logger.progress_bar=false",
         "policy.hidden_sizes=[32]", "runner.plot=false"]
RL = ["rollout.chunk_steps=4", "runner.eval_every=2", "runner.checkpoint_every=2", "algorithm.learning_starts=8",
      "algorithm.batch_size=16", "algorithm.utd_ratio=1.0"]


@pytest.mark.slow
def test_short_dagger_run_labels_what_the_policy_visits_and_resumes(tmp_path):
    demos = tmp_path / "pick_place_20"
    collect(load_config(RECIPE, SMALL), episodes=4, out=demos)
    rows = len(DemoDataset(demos))
    cloned = sft(load_config(RECIPE, [*SMALL, f"sft.dataset={demos}", "sft.epochs=1", "sft.batch_size=16",
                                      "sft.eval_every=0", "sft.log_every=1", f"experiment.output_dir={tmp_path}"]))
    assert math.isfinite(cloned.history[-1]["sft/train_loss"])

    overrides = [*SMALL, *RL, f"algorithm.demos={demos}", f"experiment.output_dir={tmp_path}"]
    first = train(load_config(RECIPE, [*overrides, "runner.iterations=2"]))
    assert len(first.history) == 2
    for k, metrics in enumerate(first.history, start=1):
        assert metrics["replay/size"] == 16 * k  # 4 envs x 4 labelled steps an iteration, all kept
        assert metrics["offpolicy/updates"] == 16  # utd_ratio 1 x 16 labelled steps
        assert 0.0 < metrics["dagger/demo_share"] < 1.0 and rows > 0
        assert math.isfinite(metrics["dagger/policy_loss"]) and metrics["dagger/policy_loss"] != 0.0

    resumed = train(load_config(RECIPE, [*overrides, "runner.iterations=3", f"runner.resume_from={first.run_dir}"]))
    assert resumed.run_dir == first.run_dir and len(resumed.history) == 1
    assert resumed.history[0]["replay/size"] == 48  # the labels of the first run came back with the checkpoint
    assert 0.0 <= resumed.final_eval["eval/success_rate"] <= 1.0

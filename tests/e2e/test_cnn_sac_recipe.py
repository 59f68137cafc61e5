"""configs/reach_cnn_sac.yaml trained for real from camera images: two iterations with updates in both, the
encoder trained and its target copy following, and a stopped-and-resumed run that ends on the weights of one run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import load_checkpoint
from embodied.config import load_config
from embodied.runs.train import train
from tests.e2e.test_sac_recipe import weights

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "reach_cnn_sac.yaml"
SHORT = ["runner.iterations=2", "env.num_envs=4", "eval_env.num_envs=4", "runner.eval_episodes=4",
         "rollout.chunk_steps=4", "runner.eval_every=2", "runner.checkpoint_every=1", "logger.progress_bar=false",
         "env.kwargs.image_size=32", "policy.channels=[8, 16]", "policy.kernel_sizes=[8, 4]", "policy.strides=[4, 2]",
         "policy.image_features=32", "policy.hidden_sizes=[32]", "algorithm.critic_hidden_sizes=[32]",
         "algorithm.learning_starts=16", "algorithm.batch_size=16", "algorithm.num_critics=3"]


@pytest.mark.slow
def test_short_cnn_sac_run_trains_the_encoder_through_the_critics(tmp_path):
    cfg = load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path}"])
    assert cfg.env.obs_mode == "rgb" and cfg.algorithm.image_shift == 4 and cfg.algorithm.critic_layernorm
    result = train(cfg)
    assert [m["offpolicy/updates"] for m in result.history] == [16, 16]  # utd_ratio 1 x 4 envs x 4 chunk steps
    for metrics in result.history:
        for key in ("sac/q_loss", "sac/policy_loss", "sac/alpha", "sac/entropy", "sac/q_mean"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    actor = load_checkpoint(result.checkpoint)["actor"]
    fields = json.loads((result.checkpoint / "replay" / "replay.json").read_text())["fields"]
    assert fields["obs/main_images"] == {"dtype": "uint8", "shape": [32, 32, 3]}  # pixels stay uint8 in the chunk files
    assert fields["next_obs/main_images"]["dtype"] == "uint8"
    policy, target = actor["policy"], actor["sac"]["target_encoder"]
    assert set(target) == {k.removeprefix("encoder.") for k in policy if k.startswith("encoder.")}
    conv = "encoder.convs.0.weight"
    assert not torch.equal(policy[f"encoder.{conv}"], target[conv])  # the target lags the online encoder


@pytest.mark.slow
def test_resumed_cnn_sac_run_equals_one_run(tmp_path):
    one_go = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'one'}"]))
    first = train(load_config(RECIPE, [*SHORT, "runner.iterations=1", f"experiment.output_dir={tmp_path / 'two'}"]))
    resumed = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'two'}",
                                         f"runner.resume_from={first.run_dir}"]))
    a, b = weights(one_go), weights(resumed)
    assert a.keys() == b.keys() and any(k.startswith("target_encoder.") for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert [m["sac/q_loss"] for m in one_go.history[1:]] == [m["sac/q_loss"] for m in resumed.history]

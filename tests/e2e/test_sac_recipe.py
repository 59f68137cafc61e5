"""configs/reach_mlp_sac.yaml trained a few iterations for real: finite losses, Q-values that move, replay in the
checkpoint, and a stopped-and-resumed run that ends on the weights of one run in one go."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from embodied.checkpoint import load_checkpoint
from embodied.config import load_config
from embodied.runner import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"
SHORT = ["runner.iterations=4", "env.num_envs=4", "eval_env.num_envs=4", "runner.eval_episodes=4",
         "rollout.chunk_steps=4", "runner.eval_every=2", "runner.checkpoint_every=2", "logger.progress_bar=false",
         "algorithm.learning_starts=16", "algorithm.batch_size=16", "policy.hidden_sizes=[32]",
         "policy.critic_hidden_sizes=[32]", "algorithm.num_critics=3", "algorithm.critic_layernorm=true"]


@pytest.mark.slow
def test_short_sac_run(tmp_path):
    cfg = load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    assert len(result.history) == 4
    for metrics in result.history:
        for key in ("sac/q_loss", "sac/actor_loss", "sac/alpha", "sac/entropy", "sac/q_mean", "replay/size"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
        assert metrics["sac/updates"] == 16  # utd_ratio 1 x 4 envs x 4 chunk steps
    assert [m["replay/size"] for m in result.history] == [16, 32, 48, 64]
    q_means = [m["sac/q_mean"] for m in result.history]
    assert len(set(q_means)) == 4, q_means  # the critics learn
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    actor = load_checkpoint(result.checkpoint)["actor"]
    assert actor["version"] == 64 and actor["replay"]["size"] == 64
    assert set(actor["sac"]) >= {"critics", "target_critics", "log_alpha", "critic_optimizer"}


def weights(result) -> dict[str, torch.Tensor]:
    """Every weight a checkpoint of a SAC run holds: the policy's, and the learner's critics and targets."""
    actor = load_checkpoint(result.checkpoint)["actor"]
    learned = {f"{part}.{k}": v for part in ("critics", "target_critics", "target_encoder")
               for k, v in actor["sac"][part].items()}
    return {**{f"policy.{k}": v for k, v in actor["policy"].items()}, **learned}


@pytest.mark.slow
def test_resumed_sac_run_equals_one_run(tmp_path):
    one_go = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'one'}"]))
    first = train(load_config(RECIPE, [*SHORT, "runner.iterations=2", f"experiment.output_dir={tmp_path / 'two'}"]))
    resumed = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'two'}",
                                         f"runner.resume_from={first.run_dir}"]))
    a, b = weights(one_go), weights(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert [m["sac/q_loss"] for m in one_go.history[2:]] == [m["sac/q_loss"] for m in resumed.history]

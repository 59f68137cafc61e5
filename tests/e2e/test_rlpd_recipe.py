"""configs/pick_place_mlp_rlpd.yaml for real, shortened: scripted PickPlace episodes collected, an SFT start of the
tanh-Gaussian MLP (``policy.type: mlp`` under SAC) on them (``policy.init_from``), then RLPD iterations drawing half
of every batch from them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from embodied.config import load_config
from embodied.data import DemoDataset
from embodied.runs.collect import collect
from embodied.runs.sft import sft
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "pick_place_mlp_rlpd.yaml"
SMALL = ["env.num_envs=4", "eval_env.num_envs=4", "runner.eval_episodes=4", "logger.progress_bar=false",
         "policy.hidden_sizes=[32]", "algorithm.critic_hidden_sizes=[32]", "runner.plot=false"]
RL = ["runner.iterations=3", "rollout.chunk_steps=4", "runner.eval_every=3", "runner.checkpoint_every=3",
      "algorithm.learning_starts=16", "algorithm.batch_size=16", "algorithm.utd_ratio=1.0",
      "algorithm.num_critics=3"]


@pytest.mark.slow
def test_short_rlpd_run_from_an_sft_start(tmp_path):
    demos = tmp_path / "pick_place_state"
    collect(load_config(RECIPE, SMALL), episodes=4, out=demos)
    rows = len(DemoDataset(demos))

    cloned = sft(load_config(RECIPE, [*SMALL, f"sft.dataset={demos}", "sft.epochs=1", "sft.batch_size=16",
                                      "sft.eval_every=0", "sft.log_every=1", f"experiment.output_dir={tmp_path}"]))
    assert math.isfinite(cloned.history[-1]["sft/train_loss"])

    result = train(load_config(RECIPE, [*SMALL, *RL, f"algorithm.demos={demos}", f"experiment.output_dir={tmp_path}",
                                        f"policy.init_from={cloned.run_dir}"]))
    assert len(result.history) == 3
    for metrics in result.history:
        assert metrics["replay/demo_transitions"] == rows  # every episode succeeded: each row is a transition
        assert metrics["offpolicy/updates"] == 16  # utd_ratio 1 x 4 envs x 4 chunk steps
        assert metrics["replay/demo_share"] == 0.5  # 8 of every 16 rows
        for key in ("sac/q_loss", "sac/policy_loss", "sac/alpha", "sac/q_mean"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name, losses", [("pick_place_mlp_crossq.yaml", ("q_loss", "policy_loss", "alpha")),
                                          ("pick_place_mlp_iql.yaml", ("q_loss", "v_loss", "policy_loss"))])
def test_the_recipes_that_compare_with_rlpd_train_from_the_same_demonstrations(tmp_path, name, losses):
    recipe = RECIPE.with_name(name)
    demos = tmp_path / "pick_place_state"
    collect(load_config(recipe, SMALL), episodes=4, out=demos)
    rl = [o for o in RL if not o.startswith("algorithm.num_critics")]  # each recipe's own critics
    cfg = load_config(recipe, [*SMALL, *rl, "algorithm.critic_warmup_iterations=1", f"algorithm.demos={demos}",
                               f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    assert len(result.history) == 3
    for metrics in result.history:
        assert metrics["replay/demo_transitions"] == len(DemoDataset(demos))
        assert metrics["replay/demo_share"] == 0.5
        assert math.isfinite(metrics[f"{cfg.algorithm.name}/q_loss"])
    for key in losses:  # after the one critic-only iteration, the policy moves too
        assert math.isfinite(result.history[-1][f"{cfg.algorithm.name}/{key}"]), key
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0

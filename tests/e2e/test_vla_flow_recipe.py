"""The flow-head recipes (PickColor, tiny VLA with a flow-matching expert), shortened: PPO with
critic warm-up and GAE, GRPO and async PPO each train 2 iterations through Flow-SDE or Flow-Noise
log-probs; greedy eval repeats itself exactly; a checkpoint of another head is refused up front."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.runs.train import train
from tests.e2e.test_vla_recipe import SHORT

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PPO, GRPO = CONFIGS / "pick_color_tinyvla_flow_ppo.yaml", CONFIGS / "pick_color_tinyvla_flow_grpo.yaml"
SMALL = ["policy.flow_width=64", "policy.flow_depth=2", "policy.flow_heads=2", "policy.flow_steps=3"]


def short_run(recipe: Path, tmp_path: Path, *overrides: str, small: tuple[str, ...] = tuple(SMALL)):
    """A shortened run of a flow recipe (``small``: the policy's size overrides); every loss finite."""
    cfg = load_config(recipe, [*SHORT, *small, *overrides, f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    assert len(result.history) == cfg.runner.iterations
    for metrics in result.history:
        for key in ("train/policy_loss", "train/approx_kl", "train/grad_norm"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    return cfg, result


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_ppo_with_critic_warmup_and_gae_trains_the_flow_head(tmp_path, mode):
    _, result = short_run(PPO, tmp_path, f"policy.flow_logprob={mode}", "algorithm.critic_warmup_iterations=1",
                          "algorithm.gae_lambda=0.95")
    first, second = result.history
    assert first["train/critic_warmup"] == 1.0 and abs(first["train/approx_kl"]) < 1e-8  # only the value head moved
    assert second["train/critic_warmup"] == 0.0 and math.isfinite(second["train/value_loss"])
    assert second["train/approx_kl"] != 0.0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_grpo_trains_the_flow_head(tmp_path, mode):
    short_run(GRPO, tmp_path, f"policy.flow_logprob={mode}", "env.num_envs=4", "algorithm.group_size=2",
              "rollout.chunk_steps=2")


@pytest.mark.slow
def test_async_ppo_trains_the_flow_head(tmp_path):
    _, result = short_run(PPO, tmp_path, "runner.mode=async", "actor.ema_decay=0")  # async refuses an average
    assert all(math.isfinite(m["train/policy_loss"]) for m in result.history)


@pytest.mark.slow
def test_greedy_eval_of_a_flow_checkpoint_gives_the_same_numbers_twice_and_another_head_is_refused(tmp_path):
    cfg, result = short_run(PPO, tmp_path, "runner.iterations=1")
    reports = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["eval", str(PPO), *SHORT, *SMALL, f"experiment.output_dir={tmp_path}", "--checkpoint",
                     str(result.checkpoint), "--episodes", "3", "--out", str(out)]) == 0
        reports.append(json.loads((out / "eval.json").read_text()))
    assert [e["return"] for e in reports[0]["episodes"]] == [e["return"] for e in reports[1]["episodes"]]
    tokens = load_config(CONFIGS / "pick_color_tinyvla_ppo.yaml",
                         [*SHORT, f"policy.init_from={result.checkpoint}", f"experiment.output_dir={tmp_path / 't'}"])
    with pytest.raises(ConfigError, match="its policy.action_head is 'flow', this config's is 'tokens'"):
        train(tokens)
    assert not (tmp_path / "t").exists()  # refused before a run dir or worker

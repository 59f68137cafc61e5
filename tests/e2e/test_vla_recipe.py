"""The tiny-VLA recipe (PickColor from images and an instruction), shortened, on both backends:
it trains, the trained tensors move, and `embodied eval` reloads its checkpoint folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import load_checkpoint, load_policy_state
from embodied.cli import main
from embodied.config import load_config
from embodied.env_runtime.factory import policy_spec
from embodied.policies.vla.configuration import VLAConfig
from embodied.policy.base import build_policy
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "pick_color_tinyvla_ppo.yaml"
SHORT = ["runner.iterations=2", "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2",
         "rollout.chunk_steps=3", "env.max_episode_steps=8", "runner.eval_every=0", "runner.checkpoint_every=0",
         "runner.eval_video=none", "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false"]
RAY = ["cluster.backend=ray", "cluster.num_env_workers=2", "cluster.num_rollout_workers=1"]


def initial_policy(cfg):
    """The policy the actor starts from (it seeds torch with experiment.seed, then builds)."""
    from embodied.envs.pick_color import PickColorEnv

    env = PickColorEnv(obs_mode=cfg.env.obs_mode)
    try:
        spec = policy_spec(env.observation_space, env.action_space)
    finally:
        env.close()
    torch.manual_seed(cfg.experiment.seed)
    return build_policy(cfg.policy, spec)


def run_and_eval(overrides: list[str], tmp_path: Path) -> None:
    overrides = [*SHORT, *overrides, f"experiment.output_dir={tmp_path}"]
    cfg = load_config(RECIPE, overrides)
    assert isinstance(cfg.policy, VLAConfig) and cfg.env.obs_mode == "rgb"
    result = train(cfg)
    assert len(result.history) == cfg.runner.iterations
    for metrics in result.history:
        for key in ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl", "train/grad_norm",
                    "env_steps_per_s"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0

    initial = initial_policy(cfg)
    before = {k: v.clone() for k, v in initial.trainable_state().items()}
    load_policy_state(initial, load_checkpoint(result.checkpoint)["actor"])  # the folder embodied eval reads too
    after = initial.trainable_state()
    assert after.keys() == before.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any(k.startswith("value_head.") for k in changed)
    assert any(("lora_" in k) if cfg.policy.lora_rank else k.startswith("backbone.") for k in changed)

    out = tmp_path / "eval"
    assert main(["eval", str(RECIPE), *overrides, "--checkpoint", str(result.checkpoint), "--episodes", "2",
                 "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["num_episodes"] == 2 and report["iteration"] == cfg.runner.iterations
    assert math.isfinite(report["return_mean"])


@pytest.mark.slow
def test_tinyvla_recipe_short_run_local(tmp_path):
    run_and_eval([], tmp_path)


@pytest.mark.slow
def test_tinyvla_recipe_with_lora_and_the_autoregressive_head(tmp_path):
    run_and_eval(["policy.lora_rank=4", "policy.action_head=autoregressive"], tmp_path)


@pytest.mark.slow
@pytest.mark.ray
def test_tinyvla_recipe_short_run_ray(tmp_path, ray_session):
    run_and_eval([*RAY, "policy.action_head=gaussian"], tmp_path)

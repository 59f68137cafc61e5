"""The CNN recipe (Push from images), shortened: it trains, and `embodied eval` reloads it. (Images over Ray's
channels and a policy's weight sync to a Ray rollout worker are the tiny VLA's Ray test, ``test_vla_recipe``.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import load_checkpoint
from embodied.cli import main
from embodied.config import load_config
from embodied.env_runtime.factory import policy_spec
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policy.base import build_policy
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "push_cnn_ppo.yaml"
SHORT = ["runner.iterations=2", "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2",
         "rollout.chunk_steps=4", "env.max_episode_steps=12", "runner.eval_every=0", "runner.checkpoint_every=0",
         "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false"]


def initial_parameters(cfg) -> dict[str, torch.Tensor]:
    """The parameters the actor starts from (it seeds torch with experiment.seed, then builds)."""
    from embodied.envs.push import PushEnv

    env = PushEnv(obs_mode=cfg.env.obs_mode, **cfg.env.kwargs)
    try:
        spec = policy_spec(env.observation_space, env.action_space)
    finally:
        env.close()
    torch.manual_seed(cfg.experiment.seed)
    return build_policy(cfg.policy, spec).state_dict()


def run_and_eval(overrides: list[str], tmp_path: Path) -> None:
    overrides = [*SHORT, *overrides, f"experiment.output_dir={tmp_path}"]
    cfg = load_config(RECIPE, overrides)
    assert isinstance(cfg.policy, CNNConfig) and cfg.env.obs_mode == "rgb"
    result = train(cfg)

    assert len(result.history) == cfg.runner.iterations
    for metrics in result.history:
        for key in ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl", "train/clip_frac",
                    "train/grad_norm", "time/rollout", "time/update", "env_steps_per_s"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    assert result.final_eval["eval/episodes"] >= cfg.runner.eval_episodes
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0

    saved = load_checkpoint(result.checkpoint)["actor"]["policy"]
    before = initial_parameters(cfg)
    assert saved.keys() == before.keys()
    assert "encoder.convs.0.weight" in saved  # the CNN really is what trained
    unchanged = [k for k in before if torch.equal(saved[k], before[k])]
    assert not unchanged, f"training left {unchanged} at their initial values"

    out = tmp_path / "eval"
    assert main(["eval", str(RECIPE), *overrides, "--checkpoint", str(result.checkpoint), "--episodes", "2",
                 "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["num_episodes"] == 2 and report["iteration"] == cfg.runner.iterations
    assert 0.0 <= report["success_rate"] <= 1.0 and math.isfinite(report["return_mean"])


@pytest.mark.slow
def test_cnn_recipe_short_run_local(tmp_path):
    run_and_eval([], tmp_path)



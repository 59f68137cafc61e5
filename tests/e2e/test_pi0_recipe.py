"""The π0 recipes (PickColor, policy.type: pi0, tiny), shortened: PPO with critic warm-up and GAE through Flow-Noise
and Flow-SDE, GRPO and async PPO each train 2 iterations; SFT from our dataset and from a LeRobot folder fits the
normalization statistics and saves a checkpoint that PPO, `embodied eval` and transformers read; checkpoints of
another policy type are refused up front, both ways."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.runs.collect import collect
from embodied.runs.sft import sft
from embodied.runs.train import train
from tests.e2e.test_vla_flow_recipe import short_run as flow_short_run
from tests.e2e.test_vla_recipe import SHORT

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PPO, GRPO, SFT, RLOO = (CONFIGS / f"pick_color_pi0tiny_{name}.yaml" for name in ("ppo", "grpo", "sft", "rloo"))
SMALL = ["policy.flow_steps=3"]


def short_run(recipe: Path, tmp_path: Path, *overrides: str):
    return flow_short_run(recipe, tmp_path, *overrides, small=tuple(SMALL))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_ppo_with_critic_warmup_and_gae_trains_pi0(tmp_path, mode):
    _, result = short_run(PPO, tmp_path, f"policy.flow_logprob={mode}", "algorithm.critic_warmup_iterations=1",
                          "algorithm.gae_lambda=0.95")
    first, second = result.history
    assert first["train/critic_warmup"] == 1.0 and abs(first["train/approx_kl"]) < 1e-8  # only the value head moved
    assert second["train/critic_warmup"] == 0.0 and second["train/approx_kl"] != 0.0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
def test_grpo_and_async_ppo_train_pi0(tmp_path):
    short_run(GRPO, tmp_path / "grpo", "env.num_envs=4", "algorithm.group_size=2", "rollout.chunk_steps=2")
    _, rloo = short_run(RLOO, tmp_path / "rloo", "env.num_envs=4", "algorithm.group_size=2", "rollout.chunk_steps=2")
    assert all(m["rloo/groups"] == 2.0 for m in rloo.history)
    short_run(PPO, tmp_path / "async", "runner.mode=async", "actor.ema_decay=0")


@pytest.fixture(scope="module")
def pick_color_demos(tmp_path_factory) -> dict[str, Path]:
    """Two scripted PickColor episodes, in our format and as a LeRobot folder (LIBERO's key layout)."""
    root = tmp_path_factory.mktemp("pi0_demos")
    cfg = load_config(SFT, ["env.num_envs=2", "eval_env.num_envs=2"])
    return {fmt: collect(cfg, episodes=2, out=root / fmt, data_format=fmt) and root / fmt
            for fmt in ("arrow", "lerobot")}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
@pytest.mark.parametrize("fmt", ["arrow", "lerobot"])
def test_sft_fits_statistics_and_its_checkpoint_starts_ppo_and_eval(tmp_path, pick_color_demos, fmt):
    from transformers import PI0ForConditionalGeneration

    result = sft(load_config(SFT, [*SHORT, *SMALL, f"sft.dataset={pick_color_demos[fmt]}", "sft.epochs=2",
                                   "sft.batch_size=8", "sft.log_every=1", "sft.val_fraction=0",
                                   "sft.eval_every=0", f"experiment.output_dir={tmp_path}"]))
    losses = [m["sft/train_loss"] for m in result.history]
    assert all(math.isfinite(x) for x in losses)
    policy_dir = result.checkpoint / "policy"
    stats = json.loads((policy_dir / "norm_stats.json").read_text())
    assert stats["source"] == "demonstrations" and len(stats["action_mean"]) == 4
    PI0ForConditionalGeneration.from_pretrained(policy_dir)  # transformers opens it alone
    if fmt == "lerobot":
        return
    _, rl = short_run(PPO, tmp_path / "ppo", f"policy.init_from={result.checkpoint}", "runner.iterations=1")
    reports = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["eval", str(PPO), *SHORT, *SMALL, f"experiment.output_dir={tmp_path}", "--checkpoint",
                     str(rl.checkpoint), "--episodes", "3", "--out", str(out)]) == 0
        reports.append(json.loads((out / "eval.json").read_text()))
    assert [e["return"] for e in reports[0]["episodes"]] == [e["return"] for e in reports[1]["episodes"]]
    assert json.loads((rl.checkpoint / "policy" / "norm_stats.json").read_text())["action_mean"] == \
        stats["action_mean"]  # carried from SFT through RL
    # Checkpoints of another policy type are refused before a run dir or worker, both ways.
    tokens = load_config(CONFIGS / "pick_color_tinyvla_ppo.yaml",
                         [*SHORT, f"policy.init_from={rl.checkpoint}", f"experiment.output_dir={tmp_path / 't'}"])
    with pytest.raises(ConfigError, match="it holds a policy.type='pi0' policy, this config trains 'vla'"):
        train(tokens)
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_a_flow_head_checkpoint_is_refused_by_a_pi0_init_from(tmp_path):
    from tests.e2e.test_vla_flow_recipe import PPO as FLOW_PPO, SMALL as FLOW_SMALL

    flow = load_config(FLOW_PPO, [*SHORT, *FLOW_SMALL, "runner.iterations=1", f"experiment.output_dir={tmp_path}"])
    checkpoint = train(flow).checkpoint
    cfg = load_config(PPO, [*SHORT, f"policy.init_from={checkpoint}", f"experiment.output_dir={tmp_path / 'p'}"])
    with pytest.raises(ConfigError, match="it holds a policy.type='vla' policy, this config trains 'pi0'"):
        train(cfg)
    assert not (tmp_path / "p").exists()

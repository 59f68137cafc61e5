"""The π0.5 recipes (PickColor, policy.type: pi05, tiny), shortened as the π0 ones are: PPO with critic warm-up
through Flow-Noise; SFT from a PaliGemma-seeded VLM fits quantile statistics and its checkpoint starts GRPO; DSRL
steers a frozen π0.5; a π0 checkpoint is refused by a π0.5 init_from."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from embodied.config import load_config
from embodied.runs.collect import collect
from embodied.runs.sft import sft
from tests.e2e.test_dsrl_recipe import check_checkpoint, dsrl_run
from tests.e2e.test_vla_flow_recipe import short_run as flow_short_run
from tests.e2e.test_vla_recipe import SHORT

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PPO, GRPO, SFT, DSRL = (CONFIGS / f"pick_color_pi05tiny_{name}.yaml" for name in ("ppo", "grpo", "sft", "dsrl"))
SMALL = ("policy.flow_steps=3", "policy.max_instruction_tokens=24")
TOKENS_SFT = CONFIGS / "pick_color_tinyvla_sft.yaml"
PI05_PROMPT = 'policy.instruction_template="Task: {task}, State: ;\\nAction: "'  # YAML's "\n": a newline
pytestmark = pytest.mark.filterwarnings("ignore:policy.type=pi05.*no normalization statistics")


def short_run(recipe: Path, tmp_path: Path, *overrides: str):
    return flow_short_run(recipe, tmp_path, *overrides, small=SMALL)


@pytest.mark.slow
def test_ppo_with_critic_warmup_trains_pi05(tmp_path):
    _, result = short_run(PPO, tmp_path, "algorithm.critic_warmup_iterations=1")
    first, second = result.history
    assert first["train/critic_warmup"] == 1.0 and abs(first["train/approx_kl"]) < 1e-8  # only the value head moved
    assert second["train/critic_warmup"] == 0.0 and second["train/approx_kl"] != 0.0


@pytest.mark.slow
def test_sft_fits_quantiles_and_its_checkpoint_starts_grpo(tmp_path):
    demos = tmp_path / "demos"
    collect(load_config(SFT, ["env.num_envs=2", "eval_env.num_envs=2"]), episodes=2, out=demos, data_format="arrow")
    short_sft = [f"sft.dataset={demos}", "sft.epochs=1", "sft.batch_size=8", "sft.log_every=1", "sft.val_fraction=0",
                 "sft.eval_every=0"]
    # The VLM from a tokens-head SFT of tiny PaliGemma on π0.5's prompt (policy.instruction_template), then π0.5
    # seeded from it: the chain docs/sft_then_rl.md measured beside the recipe's (which seeds from π0's VLM).
    tokens = sft(load_config(TOKENS_SFT, [*SHORT, *short_sft, "policy.model_path=tiny:paligemma-tiny", PI05_PROMPT,
                                          f"experiment.output_dir={tmp_path / 'vlm'}"]))
    meta = json.loads((tokens.checkpoint / "policy" / "embodied_policy.json").read_text())
    assert meta["config"]["instruction_template"] == "Task: {task}, State: ;\nAction: "
    vlm = tokens.checkpoint / "policy" / "backbone"
    result = sft(load_config(SFT, [*SHORT, *SMALL, *short_sft, f"policy.init_vlm_from={vlm}",
                                   f"experiment.output_dir={tmp_path}"]))
    assert all(math.isfinite(m["sft/train_loss"]) for m in result.history)
    stats = json.loads((result.checkpoint / "policy" / "norm_stats.json").read_text())
    assert stats["source"] == "demonstrations" and stats["mode"] == "quantiles" and len(stats["action_lo"]) == 4
    _, grpo = short_run(GRPO, tmp_path / "grpo", f"policy.init_from={result.checkpoint}", "runner.iterations=1",
                        "env.num_envs=4", "algorithm.group_size=2", "rollout.chunk_steps=2")
    assert json.loads((grpo.checkpoint / "policy" / "norm_stats.json").read_text())["action_lo"] == \
        stats["action_lo"]  # carried from SFT through RL


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:algorithm.name=dsrl without policy.init_from")
def test_dsrl_steers_pi05(tmp_path):
    _, result = dsrl_run(DSRL, tmp_path, "runner.iterations=1", small=SMALL)
    actor = check_checkpoint(result)
    assert actor["replay"]["storage"]["actions"].shape[1:] == (4, 4)  # [action_chunk, A], not the padded noise


def test_the_libero_gpu_recipe_loads_and_validates_with_a_pi05_folder(tmp_path):
    """Its model is downloaded by the user: a tiny π0.5 folder stands in (tests/embodied/config's NEEDS_A_MODEL)."""
    from embodied.config import ConfigError, config_from_dict, to_dict
    from embodied.policies.pi05.pretrained import build_tiny_pi05

    recipe = CONFIGS / "libero_pi05_ppo_gpu.yaml"
    folder = build_tiny_pi05(tmp_path / "pi05")
    cfg = load_config(recipe, [f"policy.model_path={folder}", "policy.device=auto", "policy.action_chunk=4"])
    assert (cfg.env.id, cfg.policy.type, cfg.policy.flow_logprob, cfg.policy.use_states) == (
        ["LIBERO-Spatial-v0", "LIBERO-Object-v0", "LIBERO-Goal-v0", "LIBERO-10-v0"], "pi05", "noise", True)
    assert [e.id for e in cfg.runner.extra_evals] == ["LIBERO-Object-Swap-v0", "LIBERO-Object-TempX0.1-v0"]
    assert config_from_dict(to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="policy.action_chunk: 5 executed actions, but the checkpoint predicts "
                                          "chunks of 4"):
        load_config(recipe, [f"policy.model_path={folder}", "policy.device=auto"])

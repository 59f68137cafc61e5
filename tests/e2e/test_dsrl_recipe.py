"""The DSRL recipes (PickColor), shortened: the flow VLA steered from a flow checkpoint (``policy.init_from``) on the
local backend and on Ray (a rollout worker of its own builds the frozen policy and gets only the noise policy's
weights), π0-tiny, `embodied eval` of a DSRL checkpoint, and a stopped-and-resumed run that ends on the weights of
one run in one go."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied.algorithms.dsrl import FEATURES
from embodied.checkpoint.store import load_checkpoint
from embodied.cli import main
from embodied.config import load_config
from embodied.replay.buffer import ReplayBuffer, read_replay_manifest
from embodied.runs.train import train
from tests.e2e.test_vla_flow_recipe import PPO as FLOW_PPO
from tests.e2e.test_vla_flow_recipe import SMALL
from tests.e2e.test_vla_flow_recipe import short_run as flow_short_run
from tests.e2e.test_vla_recipe import RAY, SHORT

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FLOW, PI0 = CONFIGS / "pick_color_tinyvla_flow_dsrl.yaml", CONFIGS / "pick_color_pi0tiny_dsrl.yaml"
NOISE_NETS = ["algorithm.noise_policy_hidden_sizes=[32]", "algorithm.critic_hidden_sizes=[32]",
              "algorithm.batch_size=8", "algorithm.learning_starts=8"]
DSRL_KEYS = ("dsrl/q_loss", "dsrl/policy_loss", "dsrl/alpha", "dsrl/entropy", "dsrl/q_mean", "replay/size")


def dsrl_run(recipe: Path, tmp_path: Path, *overrides: str, small: tuple[str, ...] = tuple(SMALL)):
    """A shortened DSRL run: 4 envs x 3 chunk steps an iteration, 12 updates each; every SAC metric finite."""
    cfg = load_config(recipe, [*SHORT, *small, *NOISE_NETS, *overrides, f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    assert len(result.history) == cfg.runner.iterations or cfg.runner.resume_from  # resumed: the rest of them
    for metrics in result.history:
        for key in DSRL_KEYS:
            assert math.isfinite(metrics[key]), (key, metrics[key])
        assert metrics["offpolicy/updates"] == 12  # utd_ratio 1 x 4 envs x 3 chunk steps, from the first iteration
    return cfg, result


def check_checkpoint(result) -> dict:
    """The checkpoint holds the noise policy, the learner and replay of features; no frozen weights, no policy/."""
    actor = load_checkpoint(result.checkpoint)["actor"]
    assert set(actor["policy"]) and all(k.startswith("noise_policy.") for k in actor["policy"])
    assert set(actor["dsrl"]) >= {"critics", "target_critics", "log_alpha", "critic_optimizer"}
    folder = Path(actor["replay_dir"])  # the checkpoint's replay/ chunk files
    replay = ReplayBuffer(int(read_replay_manifest(folder)["capacity"]))
    replay.load(folder)
    actor["replay"] = replay.state_dict()  # what the tests below read
    assert {f"obs/{FEATURES}", f"next_obs/{FEATURES}", "actions"} <= set(replay.storage)
    assert not (Path(result.checkpoint) / "policy").exists()
    return actor


@pytest.fixture(scope="module")
def flow_checkpoint(tmp_path_factory) -> Path:
    """A flow-head checkpoint to steer (one PPO iteration stands in for the flow SFT run)."""
    _, result = flow_short_run(FLOW_PPO, tmp_path_factory.mktemp("flow"), "runner.iterations=1")
    return Path(result.checkpoint)


@pytest.mark.slow
def test_dsrl_steers_a_flow_checkpoint_and_embodied_eval_reads_it(tmp_path, flow_checkpoint):
    overrides = [f"policy.init_from={flow_checkpoint}"]
    cfg, result = dsrl_run(FLOW, tmp_path, *overrides)
    actor = check_checkpoint(result)
    assert actor["version"] == 24 and actor["replay"]["size"] == 24
    assert actor["replay"]["storage"]["actions"].abs().max() < cfg.algorithm.noise_scale  # the noise, bounded
    out = tmp_path / "eval"
    for name in ("a", "b"):
        assert main(["eval", str(FLOW), *SHORT, *SMALL, *NOISE_NETS, *overrides, f"experiment.output_dir={tmp_path}",
                     "--checkpoint", str(result.checkpoint), "--episodes", "2", "--out", str(out / name)]) == 0
    a, b = (json.loads((out / name / "eval.json").read_text()) for name in ("a", "b"))
    assert a["num_episodes"] == 2 and [e["return"] for e in a["episodes"]] == [e["return"] for e in b["episodes"]]


@pytest.mark.slow
@pytest.mark.ray
def test_dsrl_on_ray_syncs_the_noise_policy_to_a_rollout_worker_of_its_own(tmp_path, flow_checkpoint, ray_session):
    _, result = dsrl_run(FLOW, tmp_path, *RAY, "cluster.placement=disaggregated", "algorithm.overlap=false",
                         f"policy.init_from={flow_checkpoint}")
    check_checkpoint(result)
    assert [m["offpolicy/synced"] for m in result.history] == [1.0, 1.0]  # in turn: every epoch acts with fresh weights


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
@pytest.mark.filterwarnings("ignore:algorithm.name=dsrl without policy.init_from")
def test_dsrl_steers_pi0(tmp_path):
    _, result = dsrl_run(PI0, tmp_path, small=("policy.flow_steps=3",))
    actor = check_checkpoint(result)
    assert actor["replay"]["storage"]["actions"].shape[1:] == (4, 4)  # [action_chunk, A], not π0's padded noise


def weights(result) -> dict[str, torch.Tensor]:
    actor = load_checkpoint(result.checkpoint)["actor"]
    return {**{f"policy.{k}": v for k, v in actor["policy"].items()},
            **{f"critics.{k}": v for k, v in actor["dsrl"]["critics"].items()}}


@pytest.mark.slow
def test_resumed_dsrl_run_equals_one_run(tmp_path, flow_checkpoint):
    three = ["runner.iterations=3", "runner.checkpoint_every=1", f"policy.init_from={flow_checkpoint}"]
    _, one_go = dsrl_run(FLOW, tmp_path / "one", *three)
    _, first = dsrl_run(FLOW, tmp_path / "two", *three, "runner.iterations=2")
    _, resumed = dsrl_run(FLOW, tmp_path / "two", *three, f"runner.resume_from={first.run_dir}")
    a, b = weights(one_go), weights(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert len(resumed.history) == 1
    assert [m["dsrl/q_loss"] for m in one_go.history[2:]] == [m["dsrl/q_loss"] for m in resumed.history]

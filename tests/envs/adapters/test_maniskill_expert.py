"""ManiSkill's motion-planning solutions as scripted experts (envs/adapters/maniskill/expert.py): our screw planner
sends the very actions mplib's does (fixtures/maniskill_mplib_plans.json, written with mplib under numpy < 2, where
it runs), the solution follows the state step by step through ``act``, ``embodied collect`` writes the episodes, and a
control mode the plans cannot drive is refused before any worker starts. Skipped, with the reason, where mani-skill or
every Vulkan driver is missing; marked slow (seconds per scene)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("mani_skill", reason="pip install 'embodied[maniskill]' (make setup installs it)")

from embodied.config import ConfigError, load_config  # noqa: E402
from embodied.core.registry import ENVS  # noqa: E402
from embodied.envs.adapters.maniskill import vulkan  # noqa: E402
from embodied.envs.adapters.maniskill.batched import batched_class  # noqa: E402
from embodied.envs.adapters.maniskill.expert import SOLUTIONS, MotionPlanningExpert  # noqa: E402
from embodied.envs.adapters.maniskill.tasks import task_for  # noqa: E402
from embodied.envs.experts import expert_for, has_expert  # noqa: E402
from embodied.runs.collect import check_expert, collect, expert_tasks  # noqa: E402

DRIVER = vulkan.choose_driver()
if DRIVER.source == "none":
    pytest.skip(f"no Vulkan driver: {vulkan.FIX}", allow_module_level=True)
pytestmark = pytest.mark.slow

PLANS = json.loads((Path(__file__).parent / "fixtures" / "maniskill_mplib_plans.json").read_text())["plans"]
RECIPE = Path(__file__).resolve().parents[3] / "configs" / "maniskill_pick_cube_rlpd.yaml"


@pytest.mark.parametrize("plan", PLANS, ids=[p["task"] for p in PLANS])
def test_the_solution_on_our_planner_sends_mplibs_actions(plan):
    env = ENVS.resolve(f"ManiSkill-{plan['task']}")(obs_mode="state", control_mode="pd_joint_pos",
                                                    max_episode_steps=400)
    expert = expert_for(env)
    assert isinstance(expert, MotionPlanningExpert) and expert.solution == plan["solution"]
    obs, info = env.reset(seed=plan["seed"])
    expert.reset(env)
    sent, succeeded = [], False
    for _ in plan["actions"]:
        action = expert.act(env, obs)
        sent.append(action)
        obs, _, terminated, truncated, info = env.step(action)
        succeeded |= bool(info["success"])
    # The plan is over where mplib's was: the expert now holds its last target.
    held = expert.act(env, obs)
    np.testing.assert_array_equal(held, sent[-1])
    assert expert.failure == ""
    np.testing.assert_allclose(np.stack(sent), np.asarray(plan["actions"], dtype=np.float32), atol=2e-3)
    assert succeeded == plan["success"]
    # A new episode ends the last one's plan and starts another from the new scene.
    obs, _ = env.reset(seed=plan["seed"] + 1)
    expert.reset(env)
    assert not np.allclose(expert.act(env, obs), plan["actions"][0], atol=1e-3)
    expert.close()
    env.close()


def test_under_delta_control_the_plan_is_sent_as_deltas_from_the_joint_positions():
    plan = PLANS[0]  # PickCube's
    env = ENVS.resolve(f"ManiSkill-{plan['task']}")(obs_mode="state", control_mode="pd_joint_delta_pos",
                                                    max_episode_steps=200)
    expert = expert_for(env)
    obs, info = env.reset(seed=plan["seed"])
    expert.reset(env)
    qpos = env.env.unwrapped.agent.robot.get_qpos
    for _ in range(20):
        before = qpos()[0, :7].numpy()
        action = expert.act(env, obs)
        target = expert._hold  # the plan's joint targets for this step
        np.testing.assert_allclose(action[:7], np.clip((target[:7] - before) / 0.1, -1, 1), atol=1e-5)
        assert action[7] == target[7]
        obs, *_ = env.step(action)
    assert env.action_space.low.min() == -1.0 and np.abs(action).max() <= 1.0
    expert.close()
    env.close()


def test_collect_writes_motion_planned_pick_cube_demos(tmp_path):
    cfg = load_config(RECIPE, ["env.num_envs=2", "eval_env.num_envs=2", "experiment.seed=3"])
    assert cfg.env.kwargs["control_mode"] == "pd_joint_delta_pos"
    report = collect(cfg, episodes=2, out=tmp_path / "pick_cube")
    assert (report.episodes, report.successes) == (2, 2) and report.meta is not None
    assert report.meta.expert == "MotionPlanningExpert_PickCube_v1"
    assert report.meta.env_id == "ManiSkill-PickCube-v1" and report.meta.action_dim == 8


def test_a_control_mode_the_plans_cannot_drive_is_refused_before_any_worker_starts():
    cfg = load_config(RECIPE, ["env.kwargs.control_mode=pd_ee_delta_pose"])
    with pytest.raises(ConfigError, match=r"env\.kwargs\.control_mode: .*pd_joint_pos or pd_joint_delta_pos "
                                          r"\(got 'pd_ee_delta_pose'\)"):
        check_expert(cfg)
    env = ENVS.resolve("ManiSkill-PickCube-v1")(obs_mode="state", control_mode="pd_ee_delta_pose")  # built anyway
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"ManiSkill-PickCube-v1: .*env\.kwargs\.control_mode: pd_joint_pos"):
        expert_for(env).reset(env)
    env.close()


def test_the_tasks_with_a_solution_are_the_ones_with_an_expert():
    listed = set(expert_tasks())
    for maniskill_id in SOLUTIONS:
        assert f"ManiSkill-{maniskill_id}" in listed
    assert not has_expert(ENVS.resolve("ManiSkill-PushT-v1"))  # ManiSkill ships no motion plan for it


def test_the_ppo_from_demos_recipe_collects_clones_then_starts_ppo_from_the_widened_clone(tmp_path):
    from embodied.checkpoint.store import load_checkpoint
    from embodied.runs.sft import sft
    from embodied.runs.train import train

    recipe = RECIPE.with_name("maniskill_pick_cube_ppo_from_demos.yaml")
    short = ["env.num_envs=2", "eval_env.num_envs=2", "runner.eval_episodes=2", "logger.backends=[]",
             "logger.progress_bar=false", "runner.plot=false", f"experiment.output_dir={tmp_path}"]
    data = tmp_path / "demos"
    assert collect(load_config(recipe, short), episodes=2, out=data).successes == 2
    clone = sft(load_config(recipe, [*short, f"sft.dataset={data}", "sft.epochs=1", "sft.batch_size=16"]))
    cloned = load_checkpoint(clone.checkpoint)["actor"]["policy"]
    # One iteration, all of it the critic's warm-up: the policy that acted is the clone with its Gaussian widened.
    result = train(load_config(recipe, [*short, "runner.iterations=1", "rollout.chunk_steps=10",
                                        f"policy.init_from={clone.checkpoint}", "policy.init_from_log_std=-1.0"]))
    started = load_checkpoint(result.checkpoint)["actor"]["policy"]
    assert torch.equal(started["log_std"], torch.full_like(cloned["log_std"], -1.0))
    assert not torch.allclose(cloned["log_std"], torch.tensor(-1.0))
    assert all(torch.equal(started[k], cloned[k]) for k in cloned if k.startswith("actor_mean") or k.startswith("state_"))


def test_a_seeded_reset_starts_its_episode_afresh_after_one_that_ended_holding_the_cube():
    def make():
        return ENVS.resolve("ManiSkill-PickCube-v1")(obs_mode="state", control_mode="pd_joint_delta_pos",
                                                     max_episode_steps=100)

    fresh = make()
    first, _ = fresh.reset(seed=5)
    fresh.close()
    env = make()
    expert = expert_for(env)
    obs, _ = env.reset(seed=5)
    expert.reset(env)
    for _ in range(100):
        obs, _, terminated, truncated, _ = env.step(expert.act(env, obs))
        if terminated or truncated:
            break
    assert bool(env.env.unwrapped.evaluate()["is_grasped"][0])  # the contacts a plain reset would keep
    held = env.env.unwrapped.get_state_dict()
    again, _ = env.reset(seed=5)
    np.testing.assert_array_equal(again["states"], first["states"])  # is_grasped included
    # The batched (CUDA) path's code on one CPU env: put in the held cube, one step to make its contacts, reset.
    native = batched_class(task_for("PickCube-v1"))(num_envs=1, sim_backend="physx_cpu", max_episode_steps=100,
                                                    control_mode="pd_joint_delta_pos")
    try:
        fresh_batch = native.reset(seed=5)["states"]
        native.env.unwrapped.set_state_dict(held)
        native.chunk_step(np.array([[[0, 0, 0, 0, 0, 0, 0, -1]]], np.float32))  # the gripper kept closed
        assert bool(native.env.unwrapped.evaluate()["is_grasped"][0])
        np.testing.assert_array_equal(native.reset(seed=5)["states"], fresh_batch)
        np.testing.assert_array_equal(fresh_batch[0], first["states"])
    finally:
        expert.close()
        env.close()
        native.close()

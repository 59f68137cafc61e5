"""ManiSkill3 tasks built for real on CPU PhysX (the private lavapipe that `make` fetches): check-env's rows, the
chunk-step contract of the CPU path and of the batched (CUDA) path's code run on one CPU env, resume from a pickled
env, the table against ManiSkill's registry, and a 2-iteration PPO recipe whose eval.json records the provenance.
Skipped, with the reason, where mani-skill or every Vulkan driver is missing; marked slow (seconds per scene)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mani_skill", reason="pip install 'embodied[maniskill]' (make setup installs it)")

from embodied.config import EnvConfig, load_config  # noqa: E402
from embodied.core.registry import ENVS  # noqa: E402
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES  # noqa: E402
from embodied.env_runtime.check_env import check_env  # noqa: E402
from embodied.envs.adapters.maniskill import batched, tasks, vulkan  # noqa: E402
from embodied.envs.chunked import ChunkedVectorEnv  # noqa: E402

DRIVER = vulkan.choose_driver()
if DRIVER.source == "none":
    pytest.skip(f"no Vulkan driver: {vulkan.FIX}", allow_module_level=True)
pytestmark = pytest.mark.slow

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "maniskill_pick_cube_ppo.yaml"


@pytest.mark.parametrize("obs_mode", ["state", "state+rgb"])
def test_check_env_rows_pass(obs_mode):
    cfg = EnvConfig(id="ManiSkill-StackCube-v1", obs_mode=obs_mode, kwargs={"image_size": 32})
    results = check_env(cfg, steps=20, fast=True, render="require" if obs_mode == "state" else "skip")
    failed = [f"{r.name}: {r.detail}" for r in results if r.severity == "error"]
    assert not failed, failed


def test_observations_in_our_layout_and_cameras_by_maniskill_names():
    env = ENVS.resolve("ManiSkill-StackCube-v1")(obs_mode="state+rgb", image_size=32, render_mode="rgb_array")
    try:
        obs, info = env.reset(seed=0)
        assert env.cameras == {MAIN_IMAGES: "base_camera", WRIST_IMAGES: "hand_camera"}
        assert obs[MAIN_IMAGES].shape == (32, 32, 3) and obs[MAIN_IMAGES].dtype == np.uint8
        assert obs[WRIST_IMAGES].shape == (32, 32, 3) and obs[STATES].dtype == np.float32
        assert obs[MAIN_IMAGES][:8].mean() != obs[MAIN_IMAGES][-8:].mean()  # a scene, not a blank frame
        assert env.render().shape == (32, 32, 3) and info == {"success": False}
        assert env.action_space.shape == (8,) and env.control_mode == "pd_joint_delta_pos"
    finally:
        env.close()


def test_reward_modes_and_episode_cap():
    cls = ENVS.resolve("ManiSkill-PushCube-v1")
    rewards = {}
    for mode in ("sparse", "dense", "normalized_dense"):
        env = cls(reward_mode=mode, max_episode_steps=3)
        env.reset(seed=1)
        steps = [env.step(np.zeros(8, np.float32)) for _ in range(3)]
        assert [s[3] for s in steps] == [False, False, True]  # truncated at the cap
        rewards[mode] = steps[0][1]
        env.close()
    assert rewards["sparse"] == 0.0 and rewards["dense"] > rewards["normalized_dense"] > 0.0
    with pytest.raises(ValueError, match=r"PlugCharger-v1 supports \['none', 'sparse'\]"):
        ENVS.resolve("ManiSkill-PlugCharger-v1")(reward_mode="dense")


def test_a_pickled_env_resumes_its_episode():
    """Exact resume as far as ManiSkill's state goes: PhysX's contact caches are not in its state dict, so a
    resumed episode follows the original to about 1e-4 after a step and 1e-3 after 20 (docs/maniskill.md), not to the bit."""
    env = ENVS.resolve("ManiSkill-StackCube-v1")()
    actions = np.random.default_rng(0).uniform(-1, 1, (30, 8)).astype(np.float32)
    env.reset(seed=3)
    for a in actions[:10]:
        env.step(a)
    blob = pickle.dumps(env)
    ref = [env.step(a) for a in actions[10:]]
    twin = pickle.loads(blob)
    got = [twin.step(a) for a in actions[10:]]
    assert twin._steps == 30 and env._steps == 30
    assert np.abs(ref[0][0][STATES] - got[0][0][STATES]).max() < 1e-3
    assert max(np.abs(r[0][STATES] - g[0][STATES]).max() for r, g in zip(ref, got)) < 1e-2
    a, b = env.reset(seed=5)[0], twin.reset(seed=5)[0]
    assert np.array_equal(a[STATES], b[STATES])  # seeded resets are reproducible
    env.close(), twin.close()


def test_batched_path_keeps_the_chunk_contract_on_one_cpu_env():
    """The CUDA path's code (ManiSkillBatchedEnv) on physx_cpu with one env: the same episode as the per-env path."""
    task = tasks.task_for("PushCube-v1")
    native = batched.batched_class(task)(num_envs=1, sim_backend="physx_cpu", max_episode_steps=12)
    per_env = ChunkedVectorEnv([lambda: ENVS.resolve(task.env_id)(max_episode_steps=12)])
    try:
        assert np.array_equal(native.reset(seed=7)[STATES], per_env.reset(seed=7)[STATES])
        actions = np.random.default_rng(0).uniform(-1, 1, (3, 1, 5, 8)).astype(np.float32)
        for k, a in enumerate(actions):  # 5 + 5 + 2: the episode ends at sub-step 2 of the third chunk
            rn, rp = native.chunk_step(a), per_env.chunk_step(a)
            for field in ("rewards", "executed", "terminations", "truncations", "dones"):
                assert np.allclose(getattr(rn, field), getattr(rp, field), atol=1e-6), (k, field)
        assert rn.executed.tolist() == [[True, True, False, False, False]] and rn.dones.tolist() == [True]
        assert rn.final_obs is not None and np.allclose(rn.final_obs[STATES], rp.final_obs[STATES], atol=1e-6)
        assert [(e.length, e.success_once) for e in rn.episodes] == [(e.length, e.success_once) for e in rp.episodes]
        state = native.get_state()
        native.set_state(state)
        assert native.chunk_step(actions[0]).executed.all()  # auto-reset: the next episode runs
    finally:
        native.close(), per_env.close()


def test_the_table_matches_maniskills_registry():
    import mani_skill.envs  # noqa: F401 - registers the tasks
    from mani_skill.utils.registration import REGISTERED_ENVS

    ours = {t.maniskill_id: t.max_steps for t in tasks.TASKS}
    theirs = {k: v.max_episode_steps for k, v in REGISTERED_ENVS.items()}
    assert ours == theirs


def test_two_iteration_recipe_and_its_provenance(tmp_path):
    from embodied.cli import main
    from embodied.runs.train import train

    short = ["runner.iterations=2", "env.num_envs=2", "eval_env.num_envs=2", "runner.eval_episodes=2",
             "rollout.chunk_steps=10", "runner.eval_every=0", "runner.checkpoint_every=0", "logger.backends=[]",
             "logger.progress_bar=false", "runner.plot=false", "env.preflight=false"]
    result = train(load_config(RECIPE, [*short, f"experiment.output_dir={tmp_path}"]))
    assert len(result.history) == 2 and 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    out = tmp_path / "eval"
    assert main(["eval", str(RECIPE), *short[1:], "--checkpoint", str(result.run_dir), "--episodes", "2",
                 "--out", str(out)]) == 0
    prov = json.loads((out / "eval.json").read_text())["provenance"]
    assert prov["versions"]["mani-skill"] == "3.0.1" and prov["versions"]["sapien"]
    assert prov["sim_backend"] == "physx_cpu" and prov["reward_mode"] == "normalized_dense"
    assert prov["vulkan"]["source"] == DRIVER.source and prov["max_episode_steps"] == 50

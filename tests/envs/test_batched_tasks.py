"""The batched twins of the built-in tasks (``envs/mujoco_batched.py``) against their per-env path.

Same seeds and actions must give the same observations, rewards, flags and ``executed`` masks
(1e-6 for floats, exact for flags), episodes ending mid-chunk and resets included.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from embodied.config import EnvConfig
from embodied.core.types import ChunkStepResult
from embodied.env_runtime.factory import make_vector_env
from embodied.envs.chunked import ChunkedVectorEnv
from embodied.envs.mujoco_stepper import available_cores
from embodied.envs.pick_color import PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.reach import ReachBatchedEnv, ReachEnv
from embodied.envs.stack import StackEnv

TASKS = [ReachEnv, PushEnv, PickPlaceEnv, StackEnv, PickColorEnv]
IDS = {ReachEnv: "Reach-v0", PushEnv: "Push-v0", PickPlaceEnv: "PickPlace-v0", StackEnv: "Stack-v0",
       PickColorEnv: "PickColor-v0"}


def pair(task: type, n: int, auto_reset: bool = True, **kwargs) -> tuple[ChunkedVectorEnv, object]:
    per_env = ChunkedVectorEnv([lambda: task(obs_mode="state", **kwargs) for _ in range(n)], auto_reset=auto_reset)
    twin = task.batched_twin("state")(num_envs=n, auto_reset=auto_reset, obs_mode="state", nthread=2, **kwargs)
    return per_env, twin


def assert_same(a: ChunkStepResult, b: ChunkStepResult, where: str) -> None:
    for name in ("terminations", "truncations", "executed", "dones"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"{where}: {name}")
    np.testing.assert_allclose(a.rewards, b.rewards, atol=1e-6, rtol=0, err_msg=f"{where}: rewards")
    np.testing.assert_allclose(a.obs["states"], b.obs["states"], atol=1e-6, rtol=0, err_msg=f"{where}: obs")
    assert a.obs["task_descriptions"] == b.obs["task_descriptions"], where
    assert (a.final_obs is None) == (b.final_obs is None), where
    if a.final_obs is not None:
        np.testing.assert_allclose(a.final_obs["states"], b.final_obs["states"], atol=1e-6, rtol=0, err_msg=where)
    key = [(e.env_index, e.length, e.success_once, e.success_at_end, e.task, e.sim_unstable) for e in a.episodes]
    assert key == [(e.env_index, e.length, e.success_once, e.success_at_end, e.task, e.sim_unstable)
                   for e in b.episodes], where
    for x, y in zip(a.episodes, b.episodes):
        assert abs(x.episode_return - y.episode_return) < 1e-6, where


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("auto_reset", [True, False], ids=["auto_reset", "stay_done"])
def test_random_chunks_match_the_per_env_path(task: type, auto_reset: bool):
    """Random actions, episodes truncated mid-chunk (7 steps, chunks of 3), then auto-reset or stay done."""
    per_env, twin = pair(task, 3, auto_reset, max_episode_steps=7)
    first_a, first_b = per_env.reset(seed=21), twin.reset(seed=21)
    np.testing.assert_allclose(first_a["states"], first_b["states"], atol=1e-6, rtol=0)
    rng = np.random.default_rng(3)
    for t in range(6):
        actions = rng.uniform(-1, 1, (3, 3, 4)).astype(np.float32)
        assert_same(per_env.chunk_step(actions), twin.chunk_step(actions), f"{task.__name__} chunk {t}")
    twin.close()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.__name__)
def test_scripted_experts_succeed_the_same_through_either_path(task: type):
    """The per-env experts' closed-loop actions replayed on the twin: same trajectory, success terminates
    mid-chunk at the same sub-step, and the auto-reset episodes that follow match too."""
    per_env, twin = pair(task, 2, auto_reset=True)
    per_env.reset(seed=7)
    twin.reset(seed=7)
    successes, terminated, ended = 0, False, np.zeros(2, dtype=bool)
    for t in range(60):
        result, actions = per_env.expert_chunk_step(4)
        again = twin.chunk_step(actions)
        assert_same(result, again, f"{task.__name__} expert chunk {t}")
        successes += sum(e.success_once for e in again.episodes)
        ended |= result.dones
        terminated |= bool(again.terminations.any())
        if ended.all():
            break
    assert ended.all() and successes >= 1, f"{task.__name__}: the expert succeeded in {successes} episodes"
    assert terminated  # success ended an episode (terminate_on_success), wherever it fell in the chunk
    twin.close()


def test_state_round_trip_resumes_exactly():
    per_env, twin = pair(PickColorEnv, 2, max_episode_steps=9)
    twin.reset(seed=2)
    rng = np.random.default_rng(0)
    twin.chunk_step(rng.uniform(-1, 1, (2, 4, 4)).astype(np.float32))
    saved = twin.get_state()
    actions = rng.uniform(-1, 1, (2, 4, 4)).astype(np.float32)
    a = twin.chunk_step(actions)
    twin.set_state(saved)
    assert_same(a, twin.chunk_step(actions), "after set_state")
    twin.close()


def test_render_shows_each_envs_own_episode():
    """PickColor's colours are drawn per episode on a shared model: each frame matches its per-env env."""
    per_env = ChunkedVectorEnv([lambda: PickColorEnv(render_mode="rgb_array") for _ in range(2)])
    twin = PickColorEnv.batched_twin("state")(num_envs=2, render_mode="rgb_array", nthread=1)
    per_env.reset(seed=4)
    twin.reset(seed=4)
    for a, b in zip(per_env.render(), twin.render()):
        np.testing.assert_array_equal(a, b)
    twin.close()
    per_env.close()


# -- the factory's choice and bad input ---------------------------------------------------------------


def test_factory_builds_the_twin_for_state_and_the_per_env_path_otherwise():
    cfg = EnvConfig(id="Reach-v0", num_envs=2)
    venv = make_vector_env(cfg, 2)
    assert isinstance(venv, ReachBatchedEnv)
    venv.close()
    for changed in (dict(vectorization="per_env"), dict(obs_mode="rgb")):
        venv = make_vector_env(dataclasses.replace(cfg, **changed), 1)
        assert isinstance(venv, ChunkedVectorEnv), changed
        venv.close()


def test_a_subclass_of_a_task_runs_per_env():
    class MyReach(ReachEnv):  # may change rewards: the twin would not know
        pass

    assert ReachEnv.batched_twin("state") is ReachBatchedEnv and MyReach.batched_twin("state") is None


def test_a_twin_asked_for_rgb_says_the_per_env_path_is_used_and_why():
    with pytest.raises(ValueError, match="state observations only.*rgb needs a renderer per env.*per-env path"):
        ReachBatchedEnv(num_envs=2, obs_mode="rgb")


def test_nthread_beyond_the_cores_is_clamped_with_a_warning():
    with pytest.warns(UserWarning, match="clamped"):
        venv = ReachBatchedEnv(num_envs=64, nthread=available_cores() + 3)
    assert venv.stepper.nthread == min(available_cores(), 64)
    venv.close()
    with pytest.raises(ValueError, match="nthread"):
        ReachBatchedEnv(num_envs=2, nthread=0)


def test_env_kwargs_of_a_twin_are_checked_against_the_task():
    from embodied.config import ConfigError
    from embodied.env_runtime.factory import check_env_config

    check_env_config(EnvConfig(id="Reach-v0", kwargs={"nthread": 1, "success_threshold": 0.1}))
    with pytest.raises(ConfigError, match="env.kwargs.sucess_threshold"):
        check_env_config(EnvConfig(id="Reach-v0", kwargs={"sucess_threshold": 0.1}))
    with pytest.raises(ConfigError, match="env.kwargs.nthread"):
        check_env_config(EnvConfig(id="Reach-v0", kwargs={"nthread": "two"}))


def test_check_env_passes_on_every_twin():
    from embodied.env_runtime.check_env import check_env

    for task in (ReachEnv, PickColorEnv):
        rows = check_env(EnvConfig(id=IDS[task], max_episode_steps=12), steps=24, fast=True, render="skip")
        assert all(r.passed for r in rows), [r for r in rows if not r.passed]
        assert any("BatchedEnv" in r.detail for r in rows)


def test_uniform_draws_what_generator_uniform_draws():
    """The tasks' fast ``uniform`` is ``Generator.uniform`` bit for bit, and leaves the generator where it would."""
    from embodied.envs.mujoco_base import uniform

    low, high = np.array([-0.2, -0.2, 0.05]), np.array([0.2, 0.2, 0.3])
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(2000):
        np.testing.assert_array_equal(uniform(a, low, high), b.uniform(low, high))
    assert a.random() == b.random()

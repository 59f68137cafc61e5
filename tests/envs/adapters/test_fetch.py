"""gymnasium-robotics' Fetch tasks behind the chunk-step contract (skipped without embodied[robotics])."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics", reason="install embodied[robotics]")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from embodied.config import EnvConfig  # noqa: E402
from embodied.env_runtime.factory import make_vector_env  # noqa: E402
from embodied.core.registry import ENVS  # noqa: E402
from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS  # noqa: E402
from embodied.envs.adapters.fetch import FetchEnv  # noqa: E402
from embodied.envs.chunked import ChunkedVectorEnv  # noqa: E402


def vector(env_id: str = "FetchReach-v4", num_envs: int = 2, **fields) -> ChunkedVectorEnv:
    venv = make_vector_env(EnvConfig(id=env_id, num_envs=num_envs, **fields), num_envs)
    venv.reset(seed=0)
    return venv


def test_tasks_are_registered_by_their_gymnasium_ids():
    for task in ("Reach", "Push", "Slide", "PickAndPlace"):
        assert ENVS.entry_point(f"Fetch{task}-v4") == f"embodied.envs.adapters.fetch:Fetch{task}"


def test_goal_observation_is_concatenated():
    venv = vector("FetchPush-v4", max_episode_steps=5)
    try:
        env = venv.envs[0]
        assert env.state_slices == {"observation": slice(0, 25), "achieved_goal": slice(25, 28),
                                    "desired_goal": slice(28, 31)}
        obs = venv.reset(seed=0)
        assert obs[STATES].shape == (2, 31) and obs[STATES].dtype == np.float32
        np.testing.assert_allclose(obs[STATES][0, 28:31], env.env.unwrapped.goal, rtol=1e-6)
        np.testing.assert_allclose(obs[STATES][0, 25:28], obs[STATES][0, 3:6])  # achieved = block position
        assert obs[TASK_DESCRIPTIONS] == ["push the block to the target"] * 2
    finally:
        venv.close()


def test_truncation_after_max_episode_steps():
    venv = vector(max_episode_steps=4)
    try:
        out = venv.chunk_step(np.zeros((2, 6, 4), dtype=np.float32))
        np.testing.assert_array_equal(out.executed, [[True] * 4 + [False] * 2] * 2)
        assert out.truncated.all() and not out.terminations.any()
        assert [e.length for e in out.episodes] == [4, 4]
        np.testing.assert_array_equal(out.rewards[:, :4], -1.0)  # sparse: -1 until the goal is reached
    finally:
        venv.close()


def test_reaching_the_goal_is_a_success():
    venv = vector(num_envs=1, max_episode_steps=30)
    try:
        obs = venv.reset(seed=0)
        for _ in range(30):
            grip, goal = obs[STATES][0, 0:3], obs[STATES][0, 13:16]
            action = np.zeros((1, 1, 4), dtype=np.float32)
            action[0, 0, :3] = np.clip((goal - grip) * 20.0, -1.0, 1.0)
            out = venv.chunk_step(action)
            if out.dones[0]:
                break
            obs = out.obs
        assert out.dones[0] and out.truncated[0]  # Fetch never terminates on its own
        ep = out.episodes[0]
        assert ep.success_once and ep.success_at_end and ep.episode_return > -30
    finally:
        venv.close()


def test_dense_reward_through_kwargs():
    venv = vector(num_envs=1, max_episode_steps=5, kwargs={"reward_type": "dense"})
    try:
        out = venv.chunk_step(np.zeros((1, 2, 4), dtype=np.float32))
        assert (out.rewards < 0).all() and (out.rewards > -1).all()  # minus the distance in metres
    finally:
        venv.close()


def test_rgb_observations():
    venv = vector(num_envs=1, obs_mode="state+rgb", max_episode_steps=5, kwargs={"image_size": 32})
    try:
        obs = venv.chunk_step(np.ones((1, 2, 4), dtype=np.float32)).obs
        frame = obs[MAIN_IMAGES][0]
        assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8
        assert frame.mean() > 10 and frame.std() > 5, "frame is black or flat"
    finally:
        venv.close()


def test_not_a_fetch_id_is_refused():
    with pytest.raises(ValueError, match="not a Fetch task id"):
        FetchEnv("HalfCheetah-v5")


@pytest.mark.parametrize("obs_mode", ["state", "state+rgb"])
def test_gymnasium_check_env(obs_mode):
    env = FetchEnv("FetchPickAndPlace-v4", obs_mode=obs_mode, image_size=32, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)

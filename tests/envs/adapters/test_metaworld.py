"""Meta-World v3 tasks behind the chunk-step contract (skipped without embodied[metaworld])."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("metaworld", reason="install embodied[metaworld]")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from embodied.config import EnvConfig  # noqa: E402
from embodied.env_runtime.factory import make_vector_env  # noqa: E402
from embodied.core.registry import ENVS  # noqa: E402
from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS  # noqa: E402
from embodied.envs.adapters.metaworld import MetaWorldEnv, describe  # noqa: E402
from embodied.envs.chunked import ChunkedVectorEnv  # noqa: E402

HAND, GOAL = slice(0, 3), slice(36, 39)  # in Meta-World's 39-dim observation


def vector(task: str = "reach-v3", num_envs: int = 2, **fields) -> ChunkedVectorEnv:
    kwargs = {"task": task, **fields.pop("kwargs", {})}
    venv = make_vector_env(EnvConfig(id="MetaWorld-v3", num_envs=num_envs, kwargs=kwargs, **fields), num_envs)
    venv.reset(seed=0)
    return venv


def towards_goal(obs: dict) -> np.ndarray:
    """A scripted reach: move the hand straight at the goal."""
    action = np.zeros((len(obs[STATES]), 1, 4), dtype=np.float32)
    action[:, 0, :3] = np.clip((obs[STATES][:, GOAL] - obs[STATES][:, HAND]) * 10.0, -1.0, 1.0)
    return action


def test_registered_and_described():
    assert ENVS.entry_point("MetaWorld-v3") == "embodied.envs.adapters.metaworld:MetaWorldEnv"
    assert describe("pick-place-v3") == "pick place" and describe("button-press-topdown-v3") == "button press topdown"


def test_observations_task_descriptions_and_truncation():
    venv = vector(max_episode_steps=5)
    try:
        obs = venv.reset(seed=0)
        assert obs[STATES].shape == (2, 39) and obs[STATES].dtype == np.float32
        assert obs[TASK_DESCRIPTIONS] == ["reach", "reach"]
        assert not np.allclose(obs[STATES][0, GOAL], obs[STATES][1, GOAL])  # seeds 0 and 1: two goals
        out = venv.chunk_step(np.zeros((2, 8, 4), dtype=np.float32))
        np.testing.assert_array_equal(out.executed, [[True] * 5 + [False] * 3] * 2)
        assert out.truncated.all() and [e.length for e in out.episodes] == [5, 5]
    finally:
        venv.close()


def test_seeded_resets_are_reproducible():
    venv = vector(num_envs=1)
    try:
        first = venv.reset(seed=7)[STATES]
        venv.chunk_step(np.ones((1, 3, 4), dtype=np.float32))
        np.testing.assert_array_equal(venv.reset(seed=7)[STATES], first)
    finally:
        venv.close()


def test_success_is_metaworlds_and_can_end_the_episode():
    venv = vector(num_envs=1, max_episode_steps=150, kwargs={"terminate_on_success": True})
    try:
        obs = venv.reset(seed=0)
        for _ in range(150):
            out = venv.chunk_step(towards_goal(obs))
            if out.dones[0]:
                break
            obs = out.obs
        assert out.terminated[0], "the scripted reach did not succeed"
        ep = out.episodes[0]
        assert ep.success_once and ep.success_at_end and ep.length < 150
    finally:
        venv.close()


def test_rgb_observations():
    venv = vector(num_envs=1, obs_mode="rgb", max_episode_steps=5, kwargs={"image_size": 32})
    try:
        obs = venv.chunk_step(np.ones((1, 2, 4), dtype=np.float32)).obs
        assert set(obs) == {MAIN_IMAGES, TASK_DESCRIPTIONS}
        frame = obs[MAIN_IMAGES][0]
        assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8
        assert frame.mean() > 10 and frame.std() > 5, "frame is black or flat"
    finally:
        venv.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown Meta-World task 'reach-v9'.*reach-v3"):
        MetaWorldEnv("reach-v9")
    with pytest.raises(ValueError, match="at most 500 steps"):
        MetaWorldEnv("reach-v3", max_episode_steps=501)


def test_gymnasium_check_env():
    env = MetaWorldEnv("push-v3", max_episode_steps=20, render_mode="rgb_array", width=32, height=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)

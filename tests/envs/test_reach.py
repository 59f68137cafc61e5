"""The built-in Reach task: gymnasium contract, seeding, control, rewards, rendering, errors."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported (conftest does it too)

import warnings
from collections.abc import Iterator

import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.envs.reach import ReachEnv


@pytest.fixture
def make_env() -> Iterator:
    """Build envs and close them all at the end (renderers must not outlive the test)."""
    envs: list[ReachEnv] = []

    def make(**kwargs) -> ReachEnv:
        envs.append(ReachEnv(**kwargs))
        return envs[-1]

    yield make
    for env in envs:
        env.close()


def scripted_action(obs: dict, gain: float = 10.0) -> np.ndarray:
    """Proportional controller on the ``target - tcp`` part of the state."""
    delta = obs[STATES][7:10]
    return np.append(np.clip(gain * delta, -1.0, 1.0), 1.0).astype(np.float32)


@pytest.mark.parametrize("obs_mode", ["state", "rgb", "state+rgb"])
def test_check_env(make_env, obs_mode: str) -> None:
    env = make_env(obs_mode=obs_mode, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no spec": alternative render modes cannot be tried
        check_env(env)


def test_spaces_and_layout(make_env) -> None:
    env = make_env()
    assert env.action_space.shape == (4,) and env.action_space.dtype == np.float32
    assert set(env.observation_space.spaces) == {STATES}
    obs, info = env.reset(seed=0)
    states = obs[STATES]
    assert states.shape == (10,) and states.dtype == np.float32
    np.testing.assert_allclose(states[0:3], env.tcp_pos, atol=1e-6)
    assert states[3] == pytest.approx(0.08, abs=1e-6)  # fingers open at reset
    np.testing.assert_allclose(states[4:7], env.target_pos, atol=1e-6)
    np.testing.assert_allclose(states[7:10], states[4:7] - states[0:3], atol=1e-6)
    assert info["success"] is False
    assert env.task_description == "reach the red target"


def test_seeding(make_env) -> None:
    env = make_env()
    first = env.reset(seed=7)[0][STATES]
    env.step(env.action_space.sample())
    assert np.array_equal(env.reset(seed=7)[0][STATES], first)
    assert not np.allclose(env.reset(seed=8)[0][STATES], first)
    # An unseeded reset continues the generator: a new episode.
    assert not np.allclose(env.reset()[0][STATES], first)


def test_action_moves_tcp_by_max_step(make_env) -> None:
    env = make_env()
    env.reset(seed=0)
    env._place_gripper(np.array([0.0, 0.0, 0.2]))
    mujoco.mj_forward(env.model, env.data)
    start = env.tcp_pos
    for _ in range(3):
        env.step(np.array([1.0, 0.0, 0.0, 1.0], dtype=np.float32))
    moved = env.tcp_pos - start
    assert moved[0] == pytest.approx(3 * env.max_step, abs=0.02)  # tracking lag is one partial step
    assert np.abs(moved[1:]).max() < 1e-3
    for _ in range(5):
        env.step(np.array([0.0, 0.0, 0.0, -1.0], dtype=np.float32))
    assert env.finger_opening < 0.005


def test_workspace_clipping(make_env) -> None:
    env = make_env(max_episode_steps=100)
    env.reset(seed=0)
    for _ in range(30):
        env.step(np.array([5.0, -5.0, -5.0, 0.0], dtype=np.float32))  # clipped to [-1, 1]
    np.testing.assert_allclose(env.tcp_pos[:2], [env.workspace_high[0], env.workspace_low[1]], atol=0.01)
    assert env.tcp_pos[2] > env.workspace_low[2] - 0.01


def test_scripted_controller_succeeds(make_env) -> None:
    env = make_env()
    successes = 0
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        for _ in range(env.max_episode_steps):
            obs, reward, terminated, truncated, info = env.step(scripted_action(obs))
            if terminated or truncated:
                break
        successes += bool(info["success"] and terminated)
    assert successes >= 19


def test_dense_and_sparse_rewards(make_env) -> None:
    dense, sparse = make_env(reward_type="dense"), make_env(reward_type="sparse")
    obs_d, _ = dense.reset(seed=3)
    obs_s, _ = sparse.reset(seed=3)
    for _ in range(50):
        obs_d, r_d, term_d, _, info_d = dense.step(scripted_action(obs_d))
        obs_s, r_s, term_s, _, info_s = sparse.step(scripted_action(obs_s))
        distance = float(np.linalg.norm(obs_d[STATES][7:10]))
        assert r_d == pytest.approx(-distance, abs=1e-5)
        assert r_s == float(info_s["success"])
        if term_d:
            break
    assert term_d and term_s and info_d["success"] and r_s == 1.0


def test_no_termination_when_disabled(make_env) -> None:
    env = make_env(terminate_on_success=False, max_episode_steps=40)
    obs, _ = env.reset(seed=1)
    successes = []
    for _ in range(40):
        obs, _, terminated, truncated, info = env.step(scripted_action(obs))
        assert not terminated
        successes.append(info["success"])
    assert truncated and successes[-1]


def test_truncation_at_max_episode_steps(make_env) -> None:
    env = make_env(max_episode_steps=7)
    env.reset(seed=0)
    still = np.zeros(4, dtype=np.float32)
    for step in range(1, 8):
        _, _, terminated, truncated, info = env.step(still)
        assert not terminated
        assert truncated == (step == 7)
        assert isinstance(info["success"], bool)
    env.reset(seed=1)
    assert not env.step(still)[3]  # the counter restarts with the episode


def assert_frame_ok(frame: np.ndarray, size: int) -> None:
    assert frame.shape == (size, size, 3) and frame.dtype == np.uint8
    assert frame.mean() > 10 and frame.std() > 5, "frame is black or flat"


def red_pixels(frame: np.ndarray) -> int:
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    return int(((r > 140) & (g < 80) & (b < 80)).sum())


def test_rgb_observation(make_env) -> None:
    env = make_env(obs_mode="rgb", image_size=64)
    assert set(env.observation_space.spaces) == {MAIN_IMAGES, WRIST_IMAGES}
    obs, _ = env.reset(seed=0)
    assert_frame_ok(obs[MAIN_IMAGES], 64)
    assert red_pixels(obs[MAIN_IMAGES]) > 0, "target not visible"
    obs2, *_ = env.step(np.zeros(4, dtype=np.float32))
    assert obs2[MAIN_IMAGES] is not obs[MAIN_IMAGES]
    # Moving the target moves red pixels.
    env.data.mocap_pos[env._target_mocap] = env.target_pos + np.array([0.0, 0.2, 0.0])
    mujoco.mj_kinematics(env.model, env.data)
    moved = env._get_obs()[MAIN_IMAGES]
    assert not np.array_equal(moved, obs2[MAIN_IMAGES])


def test_state_rgb_and_render(make_env) -> None:
    env = make_env(obs_mode="state+rgb", image_size=48, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs[STATES].shape == (10,)
    assert_frame_ok(obs[MAIN_IMAGES], 48)
    assert_frame_ok(env.render(), env.render_size)
    env.close()
    env.close()  # idempotent


def test_render_without_render_mode(make_env) -> None:
    env = make_env()
    env.reset(seed=0)
    assert env.render() is None
    assert env._renderer is None  # state mode never creates a GL context


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"obs_mode": "depth"}, "obs_mode"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"max_episode_steps": -3}, "max_episode_steps"),
        ({"reward_type": "shaped"}, "reward_type"),
        ({"render_mode": "human"}, "render_mode"),
        ({"image_size": 0}, "image_size"),
        ({"success_threshold": 0.0}, "success_threshold"),
    ],
)
def test_invalid_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ReachEnv(**kwargs)


def test_invalid_actions(make_env) -> None:
    env = make_env()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(4, dtype=np.float32))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.array([0.0, np.nan, 0.0, 0.0], dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, dtype=np.float32))


def test_images_match_mujoco_renderer_and_ignore_render_size(make_env) -> None:
    """One GL context serves both sizes without changing the training pixels."""
    plain = make_env(obs_mode="rgb")
    with_video = make_env(obs_mode="rgb", render_mode="rgb_array")
    obs_plain, _ = plain.reset(seed=5)
    with_video.reset(seed=5)
    with_video.render()  # a 128-pixel frame first
    assert np.array_equal(with_video._get_obs()[MAIN_IMAGES], obs_plain[MAIN_IMAGES])
    # Both cameras come from one pass (one scene update, one read); each must equal a full
    # render of its own, headlight included, and the gripper moved so the wrist view is not trivial.
    obs_plain, *_ = plain.step(np.array([0.5, -0.5, -0.5, -1.0], dtype=np.float32))
    renderer = mujoco.Renderer(plain.model, 64, 64)
    try:
        for camera, key in (("main", MAIN_IMAGES), ("wrist", WRIST_IMAGES)):
            renderer.update_scene(plain.data, camera)
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            assert np.array_equal(renderer.render(), obs_plain[key]), camera
    finally:
        renderer.close()

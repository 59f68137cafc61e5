"""Any gymnasium id behind the chunk-step contract: gymnasium's own MuJoCo envs and a toy goal env."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from embodied.config import EnvConfig, load_config
from embodied.env_runtime.factory import make_vector_env
from embodied.core.registry import ENVS, PluginError, UnknownNameError
from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES
from embodied.envs.adapters.gymnasium_env import GymnasiumEnv
from embodied.envs.chunked import ChunkedVectorEnv

ROOT = Path(__file__).resolve().parents[3]
PENDULUM = "InvertedPendulum-v5"  # states [4], action [1] in [-3, 3]; falls (terminates) when pushed
# Frames are checked on Reacher-v5: the pendulum's scene is mostly black background.


def vector(env_id: str = PENDULUM, num_envs: int = 2, **fields) -> ChunkedVectorEnv:
    venv = make_vector_env(EnvConfig(id=env_id, num_envs=num_envs, **fields), num_envs)
    venv.reset(seed=0)
    return venv


def zeros(venv: ChunkedVectorEnv, chunk: int) -> np.ndarray:
    return np.zeros((venv.num_envs, chunk, venv.action_dim), dtype=np.float32)


def assert_frames_ok(frames: np.ndarray, size: int) -> None:
    assert frames.shape[-3:] == (size, size, 3) and frames.dtype == np.uint8
    for frame in frames.reshape(-1, size, size, 3):
        assert frame.mean() > 10 and frame.std() > 5, "frame is black or flat"


def checked(env: gym.Env) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # infinite Box bounds, no spec to try other render modes
        check_env(env)


# -- registry fallback ---------------------------------------------------------------------


def test_a_gymnasium_id_resolves_to_the_adapter_bound_to_it():
    target = ENVS.resolve("HalfCheetah-v5")
    assert isinstance(target, functools.partial)
    assert target.func is GymnasiumEnv and target.args == ("HalfCheetah-v5",)
    assert "HalfCheetah-v5" not in ENVS.names()  # a fallback, not a registration
    assert ENVS.entry_point("Reach-v0") == "embodied.envs.reach:ReachEnv"  # our own names come first


def test_a_config_naming_a_gymnasium_id_loads_and_builds():
    cfg = load_config(ROOT / "configs" / "reach_mlp_ppo.yaml",
                      ["env.id=HalfCheetah-v5", "env.num_envs=2", "env.max_episode_steps=3"])
    venv = make_vector_env(cfg.env, 2)
    try:
        assert isinstance(venv, ChunkedVectorEnv) and venv.action_dim == 6
        assert venv.reset(seed=0)[STATES].shape == (2, 17)
    finally:
        venv.close()


def test_ids_known_to_neither_still_fail_with_close_matches():
    with pytest.raises(UnknownNameError) as info:
        ENVS.entry_point("HalfCheetah-v9")
    msg = str(info.value)
    assert "unknown env 'HalfCheetah-v9'" in msg and "did you mean 'HalfCheetah-v5'" in msg
    assert "Known: " in msg and "Reach-v0" in msg and "gymnasium" in msg
    msg = str(pytest.raises(UnknownNameError, ENVS.resolve, "zzzzqqqq").value)
    assert "did you mean" not in msg and "Reach-v0" in msg


def test_discrete_action_spaces_are_refused_naming_the_id():
    with pytest.raises(TypeError, match=r"'CartPole-v1' has a Discrete action space.*Box"):
        GymnasiumEnv("CartPole-v1")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="obs_mode"):
        GymnasiumEnv(PENDULUM, obs_mode="depth")
    with pytest.raises(ValueError, match="render_mode"):
        GymnasiumEnv(PENDULUM, render_mode="human")
    with pytest.raises(ValueError, match="max_episode_steps"):
        GymnasiumEnv(PENDULUM, max_episode_steps=0)


# -- chunk steps on gymnasium's MuJoCo envs ---------------------------------------------


def test_chunk_step_shapes_and_observations():
    venv = vector(max_episode_steps=50)
    try:
        assert venv.single_action_space.dtype == np.float32 and venv.action_dim == 1
        out = venv.chunk_step(zeros(venv, 3))
        assert out.rewards.shape == out.executed.shape == out.truncations.shape == (2, 3)
        assert out.executed.all() and not out.dones.any() and out.final_obs is None
        assert out.obs[STATES].shape == (2, 4) and out.obs[STATES].dtype == np.float32
        assert out.obs[TASK_DESCRIPTIONS] == ["", ""]
        np.testing.assert_array_equal(out.rewards, 1.0)  # the pendulum pays 1 per step upright
        assert not np.array_equal(out.obs[STATES][0], out.obs[STATES][1])  # seeds 0 and 1
    finally:
        venv.close()


def test_truncation_at_max_episode_steps_and_auto_reset():
    venv = vector(max_episode_steps=5)
    try:
        venv.chunk_step(zeros(venv, 3))
        out = venv.chunk_step(zeros(venv, 3))  # steps 4, 5 and (not executed) 6
        np.testing.assert_array_equal(out.executed, [[True, True, False]] * 2)
        np.testing.assert_array_equal(out.truncations, [[False, True, False]] * 2)
        assert not out.terminations.any() and out.dones.all() and out.truncated.all()
        assert [e.length for e in out.episodes] == [5, 5] and [e.episode_return for e in out.episodes] == [5.0, 5.0]
        assert not out.episodes[0].success_once  # the pendulum reports no success
        # obs is the next episode's first observation: near upright and still, unlike the terminal one.
        assert np.abs(out.obs[STATES]).max() < 0.02 < np.abs(out.final_obs[STATES]).max()
        out = venv.chunk_step(zeros(venv, 3))
        assert out.executed.all() and not out.dones.any()  # the new episode runs its full chunk
    finally:
        venv.close()


def test_termination_mid_chunk_is_reported_as_termination():
    venv = vector(num_envs=1, max_episode_steps=1000, auto_reset=False)
    try:
        push = np.full((1, 40, 1), 3.0, dtype=np.float32)
        out = venv.chunk_step(push)
        assert out.dones[0] and out.terminated[0] and not out.truncations.any()
        length = int(out.executed.sum())
        assert 1 < length < 40 and out.terminations[0, length - 1]
        assert not venv.chunk_step(push).executed.any()  # auto_reset off: stays done
    finally:
        venv.close()


def test_rgb_observations_are_rendered_frames():
    venv = vector("Reacher-v5", obs_mode="state+rgb", max_episode_steps=10, kwargs={"image_size": 32})
    try:
        obs = venv.reset(seed=0)
        assert obs[STATES].shape == (2, 10)
        assert_frames_ok(obs[MAIN_IMAGES], 32)
        out = venv.chunk_step(np.ones((2, 4, 2), dtype=np.float32))
        assert_frames_ok(out.obs[MAIN_IMAGES], 32)
        assert not np.array_equal(out.obs[MAIN_IMAGES], obs[MAIN_IMAGES])  # the arm moved
    finally:
        venv.close()


def test_rgb_only_observations_and_video_frames():
    venv = make_vector_env(EnvConfig(id="Reacher-v5", obs_mode="rgb", kwargs={"image_size": 24}), 1,
                           render_mode="rgb_array")
    try:
        obs = venv.reset(seed=0)
        assert set(obs) == {MAIN_IMAGES, TASK_DESCRIPTIONS}
        assert_frames_ok(obs[MAIN_IMAGES], 24)
        assert_frames_ok(np.stack(venv.render()), 24)
    finally:
        venv.close()


def test_frames_of_another_size_are_resized():
    env = GymnasiumEnv("Reacher-v5", obs_mode="rgb", image_size=20, width=48, height=32)
    try:
        obs, _ = env.reset(seed=0)
        assert_frames_ok(obs[MAIN_IMAGES][None], 20)
    finally:
        env.close()


def test_render_without_render_mode_returns_none():
    env = GymnasiumEnv(PENDULUM)
    env.reset(seed=0)
    assert env.render() is None
    env.close()
    env.close()  # twice is fine


@pytest.mark.parametrize("obs_mode", ["state", "rgb", "state+rgb"])
def test_gymnasium_check_env(obs_mode):
    env = GymnasiumEnv("Reacher-v5", obs_mode=obs_mode, max_episode_steps=20, render_mode="rgb_array",
                       image_size=32)
    checked(env)


# -- goal-conditioned dict observations, success and action translation (a toy env) -------


class GoalToy(gym.Env):
    """A point in 2-D chasing a goal, with gymnasium-robotics' dict observation and ``is_success``.

    The action space is a [2, 1] Box, to check that the adapter flattens it.
    """

    metadata = {"render_modes": []}
    last_action: np.ndarray | None = None

    def __init__(self) -> None:
        box = functools.partial(spaces.Box, -10.0, 10.0, dtype=np.float64)
        self.observation_space = spaces.Dict(
            {"desired_goal": box(shape=(2,)), "observation": box(shape=(3,)), "achieved_goal": box(shape=(2,))}
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2, 1), dtype=np.float64)

    def _obs(self) -> dict:
        return {"observation": np.array([*self.pos, 7.0]), "achieved_goal": self.pos.copy(),
                "desired_goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.goal = np.zeros(2), np.array([0.5, 0.0])
        return self._obs(), {}

    def step(self, action):
        GoalToy.last_action = np.array(action)
        self.pos = self.pos + action[:, 0] * 0.25
        success = float(np.linalg.norm(self.pos - self.goal) < 0.1)
        return self._obs(), success - 1.0, False, False, {"is_success": np.float32(success)}


@pytest.fixture
def goal_toy() -> Iterator[str]:
    env_id = "EmbodiedGoalToy-v0"
    gym.register(env_id, entry_point=GoalToy, max_episode_steps=10)
    yield env_id
    del gym.envs.registry[env_id]


def test_goal_observations_are_concatenated_observation_achieved_desired(goal_toy):
    env = GymnasiumEnv(goal_toy)
    assert env.observation_space[STATES].shape == (7,)
    assert env.state_slices == {"observation": slice(0, 3), "achieved_goal": slice(3, 5),
                                "desired_goal": slice(5, 7)}
    obs, info = env.reset(seed=0)
    np.testing.assert_array_equal(obs[STATES], [0, 0, 7, 0, 0, 0.5, 0])
    assert obs[STATES].dtype == np.float32 and info["success"] is False


def test_is_success_becomes_success_and_actions_are_flat_and_clipped(goal_toy):
    venv = vector(goal_toy, num_envs=1, max_episode_steps=10)
    try:
        assert venv.single_action_space.shape == (2,)
        actions = np.zeros((1, 3, 2), dtype=np.float32)
        actions[0, :, 0] = [5.0, 1.0, 0.0]  # the first is clipped to 1: x = 0.25, 0.5, 0.5
        out = venv.chunk_step(actions)
        np.testing.assert_array_equal(GoalToy.last_action, [[0.0], [0.0]])
        np.testing.assert_array_equal(out.rewards, [[-1, 0, 0]])
        np.testing.assert_allclose(out.obs[STATES][0, :2], [0.5, 0.0])
        out = venv.chunk_step(np.full((1, 10, 2), -1.0, dtype=np.float32))  # leaves the goal, truncated
        assert out.dones[0] and out.truncated[0] and int(out.executed.sum()) == 7
        ep = out.episodes[0]
        assert ep.length == 10 and ep.success_once and not ep.success_at_end
    finally:
        venv.close()


def test_goal_env_passes_check_env(goal_toy):
    checked(GymnasiumEnv(goal_toy))


def test_rgb_observations_of_an_env_that_cannot_render_fail_clearly(goal_toy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((TypeError, ValueError), match="render_mode"):
            GymnasiumEnv(goal_toy, obs_mode="rgb")


# -- plain gymnasium classes named by module:Class go through the same adapter ---------------

PLAIN = "tests.plain_envs:PointReach"
CAMERAS = "tests.plain_envs:Cameras"


def test_a_plain_class_resolves_to_the_adapter_bound_to_it():
    from tests.plain_envs import PointReach
    from tests.toy_batched import PointMassBatch
    from tests.toy_envs import CountingEnv

    target = ENVS.resolve(PLAIN)
    assert isinstance(target, functools.partial) and target.func is GymnasiumEnv and target.args == (PointReach,)
    assert ENVS.resolve("tests.toy_envs:CountingEnv") is CountingEnv  # our convention: the fast path, no adapter
    assert ENVS.resolve("tests.toy_batched:PointMassBatch") is PointMassBatch  # BatchedEnv: unchanged
    assert ENVS.resolve("Reach-v0").__name__ == "ReachEnv"


def test_plain_box_observations_become_float32_states_under_the_framework_time_limit():
    venv = vector(PLAIN, num_envs=2, max_episode_steps=5)  # the class's own max_steps is 200
    try:
        obs = venv.reset(seed=0)
        assert set(obs) == {STATES, TASK_DESCRIPTIONS}
        assert obs[STATES].shape == (2, 4) and obs[STATES].dtype == np.float32  # float64 converted
        assert obs[TASK_DESCRIPTIONS] == ["move the point to the goal"] * 2  # the class's attribute
        out = venv.chunk_step(zeros(venv, 8))
        np.testing.assert_array_equal(out.executed, [[True] * 5 + [False] * 3] * 2)
        assert out.truncated.all() and [e.length for e in out.episodes] == [5, 5]
    finally:
        venv.close()


def test_plain_class_own_kwargs_and_is_success():
    venv = vector(PLAIN, num_envs=1, max_episode_steps=50, kwargs={"max_steps": 3, "speed": 1.0})
    try:
        out = venv.chunk_step(zeros(venv, 4))
        assert int(out.executed.sum()) == 3 and out.truncated[0]  # its own max_steps, from env.kwargs
        env = venv.envs[0]
        env.reset(seed=0)
        inner = env.env.unwrapped
        inner.pos = inner.goal.copy()
        _, _, terminated, _, info = env.step(np.zeros(2, np.float32))
        assert terminated and info["success"] is True  # info["is_success"] read
    finally:
        venv.close()


def test_plain_class_rgb_observations_come_from_render():
    venv = make_vector_env(EnvConfig(id=PLAIN, obs_mode="rgb", kwargs={"image_size": 16}), 2,
                           render_mode="rgb_array")
    try:
        obs = venv.reset(seed=0)
        assert set(obs) == {MAIN_IMAGES, TASK_DESCRIPTIONS}
        assert obs[MAIN_IMAGES].shape == (2, 16, 16, 3) and obs[MAIN_IMAGES].dtype == np.uint8
        assert (obs[MAIN_IMAGES] == 255).any()  # the red point is drawn
        assert venv.envs[0].env.unwrapped.render_mode == "rgb_array"  # its constructor takes render_mode
        assert [f.shape for f in venv.render()] == [(32, 32, 3)] * 2  # videos: the env's own frames
    finally:
        venv.close()


def test_render_mode_is_passed_only_when_the_constructor_takes_it():
    env = GymnasiumEnv(ENVS.resolve(CAMERAS).args[0], obs_mode="state+rgb")
    env.close()  # Cameras takes no render_mode, and needs none: its images are observations
    with pytest.raises(PluginError, match=r"renders only \[\].*fix: give its constructor a render_mode"):
        GymnasiumEnv(ENVS.resolve(CAMERAS).args[0], render_mode="rgb_array")  # videos need render()


@pytest.mark.parametrize("obs_mode", ["state", "rgb", "state+rgb"])
def test_plain_class_passes_gymnasium_check_env(obs_mode):
    checked(ENVS.resolve(PLAIN)(obs_mode=obs_mode, max_episode_steps=20, render_mode="rgb_array", image_size=16))


def test_dict_observations_with_cameras_map_onto_our_keys():
    venv = vector(CAMERAS, num_envs=2, obs_mode="state+rgb", max_episode_steps=10)
    try:
        assert set(venv.single_observation_space.spaces) == {STATES, MAIN_IMAGES, WRIST_IMAGES}
        obs = venv.reset(seed=0)
        assert obs[STATES].shape == (2, 3) and obs[STATES].dtype == np.float32  # only the non-image entry
        assert obs[MAIN_IMAGES].shape == (2, 12, 16, 3) and (obs[MAIN_IMAGES] == 100).all()  # first camera
        assert obs[WRIST_IMAGES].shape == (2, 8, 8, 3) and (obs[WRIST_IMAGES] == 200).all()  # second camera
        assert obs[TASK_DESCRIPTIONS] == ["wave 2", "wave 2"]  # a callable, read at reset
        assert venv.single_action_space.dtype == np.float32  # float64 actions: cast back per step
    finally:
        venv.close()
    state_only = vector(CAMERAS, num_envs=1, obs_mode="state")
    assert set(state_only.reset(seed=0)) == {STATES, TASK_DESCRIPTIONS}
    state_only.close()


def test_success_key_and_task_description_options():
    venv = vector(CAMERAS, num_envs=1, max_episode_steps=10,
                  kwargs={"success_key": "reached", "task_description": "wave hello"})
    try:
        out = venv.chunk_step(np.ones((1, 10, 3), np.float32))  # joints[0] reaches 1 at step 2; truncated at 10
        [episode] = out.episodes
        assert episode.length == 10 and episode.success_once and episode.success_at_end
        assert venv.reset(seed=0)[TASK_DESCRIPTIONS] == ["wave hello"]  # the config string wins
    finally:
        venv.close()
    env = GymnasiumEnv(ENVS.resolve(CAMERAS).args[0], success_key="goal_reached")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"without 'goal_reached' \(env.kwargs.success_key\).*\['reached'\]"):
        env.step(np.zeros(3, np.float32))


def test_images_only_observations_need_rgb_mode():
    class Pixels(gym.Env):  # a pixel env (like CarRacing): its whole observation is one camera
        def __init__(self):
            self.observation_space = spaces.Box(0, 255, (6, 6, 3), np.uint8)
            self.action_space = spaces.Box(-1, 1, (1,), np.float32)

    with pytest.raises(PluginError, match="images only.*Fix: set env.obs_mode=rgb"):
        GymnasiumEnv(Pixels)
    env = GymnasiumEnv(Pixels, obs_mode="rgb")
    assert env.observation_space[MAIN_IMAGES].shape == (6, 6, 3)


def test_a_discrete_plain_class_is_refused_naming_the_class_and_the_fix():
    with pytest.raises(PluginError, match=r"'tests.plain_envs:ChoosesDiscretely' has a Discrete action space"
                                        r"(.|\n)*Fix: give the env a gymnasium.spaces.Box action space"):
        make_vector_env(EnvConfig(id="tests.plain_envs:ChoosesDiscretely"), 1)

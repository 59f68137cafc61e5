"""The built-in manipulation tasks (Push, PickPlace, Stack, PickColor): gymnasium contract,
observation layouts, seeding, cameras, rewards, truncation, physical grasps and bad arguments."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported (conftest does it too)

import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from embodied.core.registry import ENVS
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.envs.experts import PickColorExpert, expert_for
from embodied.envs.mujoco_base import TableTopEnv
from embodied.envs.pick_color import COLORS, PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.stack import StackEnv

TASKS: dict[str, type[TableTopEnv]] = {
    "Push-v0": PushEnv,
    "PickPlace-v0": PickPlaceEnv,
    "Stack-v0": StackEnv,
    "PickColor-v0": PickColorEnv,
}
task_param = pytest.mark.parametrize("cls", list(TASKS.values()), ids=list(TASKS))


@pytest.fixture
def make_env() -> Iterator[Callable[..., TableTopEnv]]:
    """Build envs and close them all at the end (renderers must not outlive the test)."""
    envs: list[TableTopEnv] = []

    def make(cls: type[TableTopEnv], **kwargs) -> TableTopEnv:
        envs.append(cls(**kwargs))
        return envs[-1]

    yield make
    for env in envs:
        env.close()


def run_expert(env: TableTopEnv, seed: int) -> tuple[list[float], list[bool]]:
    """Rewards and successes of one expert episode."""
    expert = expert_for(env)
    obs, _ = env.reset(seed=seed)
    expert.reset(env)
    rewards, successes = [], []
    while True:
        obs, reward, terminated, truncated, info = env.step(expert.act(env, obs))
        rewards.append(reward)
        successes.append(info["success"])
        if terminated or truncated:
            return rewards, successes


def assert_frame_ok(frame: np.ndarray, size: int) -> None:
    assert frame.shape == (size, size, 3) and frame.dtype == np.uint8
    assert frame.mean() > 10 and frame.std() > 5, "frame is black or flat"


@pytest.mark.parametrize("env_id", list(TASKS))
def test_registered(env_id: str) -> None:
    assert ENVS.resolve(env_id) is TASKS[env_id]


@task_param
@pytest.mark.parametrize("obs_mode", ["state", "state+rgb"])
def test_check_env(make_env, cls: type[TableTopEnv], obs_mode: str) -> None:
    env = make_env(cls, obs_mode=obs_mode, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no spec": alternative render modes cannot be tried
        check_env(env)


@task_param
def test_observation_keys(make_env, cls: type[TableTopEnv]) -> None:
    expected = {"state": {STATES}, "rgb": {MAIN_IMAGES, WRIST_IMAGES}, "state+rgb": {STATES, MAIN_IMAGES, WRIST_IMAGES}}
    for mode, keys in expected.items():
        env = make_env(cls, obs_mode=mode, image_size=32)
        assert set(env.observation_space.spaces) == keys
        assert set(env.reset(seed=0)[0]) == keys
    assert env.action_space.shape == (4,) and env.action_space.dtype == np.float32


def _layout_push_or_pick_place(env: PushEnv | PickPlaceEnv, s: np.ndarray) -> None:
    np.testing.assert_allclose(s[4:7], env.cube_pos, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(s[7:11]), 1.0, atol=1e-5)  # unit quaternion
    np.testing.assert_allclose(s[11:14], env.goal_pos, atol=1e-6)
    np.testing.assert_allclose(s[14:17], s[4:7] - s[0:3], atol=1e-6)
    np.testing.assert_allclose(s[17:20], s[11:14] - s[4:7], atol=1e-6)


def _layout_stack(env: StackEnv, s: np.ndarray) -> None:
    np.testing.assert_allclose(s[4:7], env.top_pos, atol=1e-6)
    np.testing.assert_allclose(s[11:14], env.base_pos, atol=1e-6)
    np.testing.assert_allclose(s[18:21], s[4:7] - s[0:3], atol=1e-6)
    np.testing.assert_allclose(s[21:24], s[11:14] + (0, 0, 2 * env.cube_half) - s[4:7], atol=1e-6)


def _layout_pick_color(env: PickColorEnv, s: np.ndarray) -> None:
    np.testing.assert_allclose(s[4:16], env.cube_positions.ravel(), atol=1e-6)


LAYOUTS: dict[type, Callable] = {
    PushEnv: _layout_push_or_pick_place,
    PickPlaceEnv: _layout_push_or_pick_place,
    StackEnv: _layout_stack,
    PickColorEnv: _layout_pick_color,
}


@task_param
def test_state_layout(make_env, cls: type[TableTopEnv]) -> None:
    env = make_env(cls)
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        states = obs[STATES]
        assert states.shape == (cls.STATE_DIM,) and states.dtype == np.float32
        np.testing.assert_allclose(states[0:3], env.tcp_pos, atol=1e-6)
        assert states[3] == pytest.approx(0.08, abs=1e-6)  # fingers open at reset
        LAYOUTS[cls](env, states)
        assert info["success"] is False
        assert isinstance(env.task_description, str) and env.task_description


@task_param
def test_seeding(make_env, cls: type[TableTopEnv]) -> None:
    env = make_env(cls, obs_mode="state+rgb", image_size=32)
    first = env.reset(seed=7)[0]
    env.step(env.action_space.sample())
    again = env.reset(seed=7)[0]
    for key in first:
        assert np.array_equal(first[key], again[key]), key
    other = env.reset(seed=8)[0]
    assert not np.allclose(other[STATES], first[STATES])
    assert not np.array_equal(other[MAIN_IMAGES], first[MAIN_IMAGES])
    assert not np.allclose(env.reset()[0][STATES], first[STATES])  # an unseeded reset: a new episode


@task_param
def test_cameras(make_env, cls: type[TableTopEnv]) -> None:
    env = make_env(cls, obs_mode="rgb", image_size=48, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert_frame_ok(obs[MAIN_IMAGES], 48)
    assert_frame_ok(obs[WRIST_IMAGES], 48)
    assert not np.array_equal(obs[MAIN_IMAGES], obs[WRIST_IMAGES])
    assert_frame_ok(env.render(), env.render_size)
    # The wrist camera rides on the gripper: moving it changes the wrist view, not the table's.
    for _ in range(3):
        moved, *_ = env.step(np.array([0.0, 1.0, 0.0, 1.0], dtype=np.float32))
    assert not np.array_equal(moved[WRIST_IMAGES], obs[WRIST_IMAGES])


@task_param
def test_dense_and_sparse_rewards(make_env, cls: type[TableTopEnv]) -> None:
    dense, successes = run_expert(make_env(cls, reward_type="dense"), seed=3)
    sparse, sparse_successes = run_expert(make_env(cls, reward_type="sparse"), seed=3)
    assert successes == sparse_successes and successes[-1] and not any(successes[:-1])
    assert sparse == [float(s) for s in successes]
    assert all(-1.0 <= r < 0.0 for r in dense[:-1]) and dense[-1] == 0.0
    # Informative: the shaped reward grows as the expert goes through the stages.
    assert dense[-2] > dense[0] + 0.2


@task_param
def test_truncation_at_max_episode_steps(make_env, cls: type[TableTopEnv]) -> None:
    env = make_env(cls, max_episode_steps=7)
    assert cls().max_episode_steps >= 100  # the default leaves room for a learning policy
    env.reset(seed=0)
    still = np.zeros(4, dtype=np.float32)
    for step in range(1, 8):
        _, _, terminated, truncated, info = env.step(still)
        assert not terminated and not info["success"]
        assert truncated == (step == 7)
    env.reset(seed=1)
    assert not env.step(still)[3]  # the counter restarts with the episode


@task_param
def test_no_termination_when_disabled(make_env, cls: type[TableTopEnv]) -> None:
    env = make_env(cls, terminate_on_success=False, max_episode_steps=60)
    rewards, successes = run_expert(env, seed=0)
    assert len(rewards) == 60 and any(successes)


@pytest.mark.parametrize("cls", [PickPlaceEnv, PickColorEnv], ids=["PickPlace-v0", "PickColor-v0"])
def test_grasp_is_friction_only(make_env, cls: type[TableTopEnv]) -> None:
    """A lifted cube is held by finger friction alone: opening the fingers drops it."""
    env = make_env(cls, terminate_on_success=False, max_episode_steps=200)
    assert env.model.neq == 1  # the gripper's own weld to its mocap target, nothing else
    expert = expert_for(env)
    obs, _ = env.reset(seed=2)
    expert.reset(env)
    held = None
    for _ in range(60):
        obs, *_ = env.step(expert.act(env, obs))
        cube = expert.cube(env)
        if env.is_grasped and cube[2] > env.cube_half + 0.06:
            held = cube
            break
    assert held is not None, "the expert never lifted the cube"
    for _ in range(15):
        env.step(np.array([0.0, 0.0, 0.0, 1.0], dtype=np.float32))
    assert not env.is_grasped
    assert expert.cube(env)[2] < env.cube_half + 0.01  # fell back onto the table


def test_pick_color_description_matches_target(make_env) -> None:
    env = make_env(PickColorEnv)
    named, targets, orders = set(), set(), set()
    for seed in range(30):
        _, info = env.reset(seed=seed)
        target = info["target_index"]
        assert target == env.target_index and 0 <= target < PickColorEnv.NUM_CUBES
        color = env.task_description.removeprefix("pick up the ").removesuffix(" cube")
        assert env.task_description == f"pick up the {color} cube" and color in COLORS
        geom = env.model.geom(f"cube{target}").id
        np.testing.assert_allclose(env.model.geom_rgba[geom], COLORS[color], atol=1e-6)
        assert sorted(env.cube_colors) == sorted(COLORS)  # every colour once
        named.add(color)
        targets.add(target)
        orders.add(tuple(env.cube_colors))
        _, _, _, _, step_info = env.step(np.zeros(4, dtype=np.float32))
        assert step_info["target_index"] == target
    assert named == set(COLORS) and len(targets) == PickColorEnv.NUM_CUBES and len(orders) > 5


def test_pick_color_frames_the_cubes_from_its_own_camera_and_starts_at_home(make_env) -> None:
    """PickColor's main image comes from its ``overhead`` camera, where each cube covers several times
    the pixels robot.xml's ``main`` gives it; the gripper starts near its home pose."""
    env = make_env(PickColorEnv, obs_mode="rgb")
    assert env.MAIN_CAMERA == "overhead" and env._main_camera == env.model.camera("overhead").id
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs[MAIN_IMAGES], env._render_camera(env.model.camera("overhead").id, 64, True))
    wide = env._render_camera(env.model.camera("main").id, 64, True)

    def cube_pixels(image: np.ndarray) -> int:  # pixels of the pure-colour cubes (the table is beige)
        rgb = image.astype(int)
        return int(((rgb.max(-1) - rgb.min(-1)) > 120).sum())

    assert cube_pixels(obs[MAIN_IMAGES]) > 3 * cube_pixels(wide) > 0
    for seed in range(20):
        env.reset(seed=seed)
        assert np.all(env.tcp_pos >= PickColorEnv.gripper_init_low - 0.005)
        assert np.all(env.tcp_pos <= PickColorEnv.gripper_init_high + 0.005)


class WrongCubeExpert(PickColorExpert):
    """Lifts cube ``index`` whatever the instruction says."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def cube(self, env: PickColorEnv) -> np.ndarray:
        return env.cube_positions[self.index]

    def grasped(self, env: PickColorEnv) -> bool:
        return env._is_grasped(env._geoms[self.index])


def test_pick_color_success_needs_the_named_cube(make_env) -> None:
    """Lifting another cube is no success: the state alone cannot tell which cube is meant."""
    env = make_env(PickColorEnv, terminate_on_success=False, max_episode_steps=60)
    obs, info = env.reset(seed=4)
    wrong = (info["target_index"] + 1) % PickColorEnv.NUM_CUBES
    expert = WrongCubeExpert(wrong)
    lifted = False
    for _ in range(60):
        obs, reward, _, _, info = env.step(expert.act(env, obs))
        assert not info["success"] and reward < 0
        lifted |= bool(env.cube_positions[wrong][2] > env.cube_half + env.lift_height)
    assert lifted


COMMON_BAD_ARGS = [
    ({"obs_mode": "depth"}, "obs_mode"),
    ({"max_episode_steps": 0}, "max_episode_steps"),
    ({"max_episode_steps": 2.5}, "max_episode_steps"),
    ({"reward_type": "shaped"}, "reward_type"),
    ({"render_mode": "human"}, "render_mode"),
    ({"image_size": 0}, "image_size"),
]
TASK_BAD_ARGS = [
    (PushEnv, {"success_threshold": 0.0}, "success_threshold"),
    (PickPlaceEnv, {"success_threshold": -0.1}, "success_threshold"),
    (PickPlaceEnv, {"table_goal_prob": 1.5}, "table_goal_prob"),
    (StackEnv, {"xy_tolerance": 0.0}, "xy_tolerance"),
    (StackEnv, {"xy_tolerance": 0.05}, "xy_tolerance"),  # a cube beside the other would count
    (PickColorEnv, {"lift_height": 0.0}, "lift_height"),
    (PickColorEnv, {"lift_height": 1.0}, "lift_height"),  # above the workspace
]


@task_param
@pytest.mark.parametrize(("kwargs", "name"), COMMON_BAD_ARGS, ids=[n for _, n in COMMON_BAD_ARGS])
def test_invalid_arguments(cls: type[TableTopEnv], kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


@pytest.mark.parametrize(("cls", "kwargs", "name"), TASK_BAD_ARGS, ids=[f"{c.__name__}-{n}" for c, _, n in TASK_BAD_ARGS])
def test_invalid_task_arguments(cls: type[TableTopEnv], kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


def test_a_task_written_to_the_hooks_of_before_runs_through_them_with_a_warning():
    """A TableTopEnv subclass that still defines _dense_reward() and _is_success() (not _reward_success()) steps as
    its hooks say, warning once."""
    import warnings

    from embodied.envs import mujoco_base
    from embodied.envs.reach import ReachEnv

    class OldReach(ReachEnv):
        _reward_success = mujoco_base.TableTopEnv._reward_success

        def _dense_reward(self) -> float:
            return -0.25

        def _is_success(self) -> bool:
            return False

    env = OldReach()
    with pytest.warns(FutureWarning, match="OldReach defines _dense_reward\\(\\) and _is_success\\(\\)"):
        env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(4, dtype=np.float32))
    assert reward == -0.25 and not terminated and info["success"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.step(np.zeros(4, dtype=np.float32))  # once per class
    env.close()

"""The scripted experts solve their tasks: >= 95 of 100 seeded episodes each (state mode, fast)."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported (conftest does it too)

import gymnasium as gym
import numpy as np
import pytest

from embodied.envs.experts import PickColorExpert, PickPlaceExpert, PushExpert, ReachExpert, StackExpert, expert_for
from embodied.envs.mujoco_base import TableTopEnv
from embodied.envs.pick_color import PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.reach import ReachEnv
from embodied.envs.stack import StackEnv

EXPERTS: dict[str, tuple[type[TableTopEnv], type]] = {
    "Reach-v0": (ReachEnv, ReachExpert),
    "Push-v0": (PushEnv, PushExpert),
    "PickPlace-v0": (PickPlaceEnv, PickPlaceExpert),
    "Stack-v0": (StackEnv, StackExpert),
    "PickColor-v0": (PickColorEnv, PickColorExpert),
}
SEEDS = range(100)


@pytest.mark.parametrize("env_id", list(EXPERTS))
def test_expert_success_rate(env_id: str) -> None:
    env_cls, expert_cls = EXPERTS[env_id]
    env = env_cls()
    expert = expert_for(env)
    assert type(expert) is expert_cls
    failed = []
    for seed in SEEDS:
        obs, info = env.reset(seed=seed)
        expert.reset(env)
        terminated = truncated = False
        while not (terminated or truncated):
            action = expert.act(env, obs)
            assert action.shape == (4,) and action.dtype == np.float32 and env.action_space.contains(action)
            obs, _, terminated, truncated, info = env.step(action)
        if not (terminated and info["success"]):
            failed.append(seed)
    assert len(failed) <= 5, f"{env_id}: the expert failed seeds {failed}"


def test_expert_for_looks_through_wrappers() -> None:
    env = gym.wrappers.RecordEpisodeStatistics(PushEnv())
    expert = expert_for(env)
    assert isinstance(expert, PushExpert)
    obs, _ = env.reset(seed=0)
    expert.reset(env)
    for _ in range(100):
        obs, _, terminated, truncated, info = env.step(expert.act(env, obs))
        if terminated or truncated:
            break
    assert info["success"]


def test_expert_for_unknown_env() -> None:
    class Other(gym.Env):
        pass

    with pytest.raises(ValueError, match="no scripted expert for Other.*ReachEnv"):
        expert_for(Other())

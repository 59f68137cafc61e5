"""`embodied check-env` passes a good simulator and names what is wrong with a broken one."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.check_env import check_env, main
from embodied.config import EnvConfig
from embodied.registry import ENVS
from tests.toy_envs import CountingEnv


def failures(env_cls, **cfg) -> dict[str, str]:
    name = f"Broken-{env_cls.__name__}-v0"
    ENVS.register(name, env_cls, overwrite=True)
    results = check_env(EnvConfig(id=name, num_envs=2, **cfg), steps=40)
    return {r.name: f"{r.detail} | fix: {r.fix}" for r in results if not r.passed}


class Seeded(CountingEnv):
    """CountingEnv whose observation depends only on the seed (so determinism holds)."""

    def _obs(self):
        return {"states": np.array([self.t, self.first_seed, self.np_random.random()], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        self.first_seed = -1
        return super().reset(seed=seed, options=options)


class FourTuple(Seeded):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class NoSuccess(Seeded):
    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {}


class Float64States(Seeded):
    def _obs(self):
        return {"states": super()._obs()["states"].astype(np.float64)}


class NeverEnds(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__()  # ignores the time limit


class NaNReward(Seeded):
    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float("nan"), terminated, truncated, info


class BlackCamera(Seeded):
    def __init__(self, obs_mode: str = "rgb", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)
        import gymnasium as gym

        self.observation_space = gym.spaces.Dict({"main_images": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})

    def _obs(self):
        return {"main_images": np.zeros((8, 8, 3), dtype=np.uint8)}


def test_builtin_reach_passes_every_check(capsys):
    assert main(["Reach-v0", "--steps", "40"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "0 failed" in out


@pytest.mark.parametrize("env_cls, check, words", [
    (FourTuple, "step types and info['success']", "step returned tuple of length 4"),
    (NoSuccess, "step types and info['success']", "no 'success' key"),
    (Float64States, "observations: keys, dtypes, shapes, finite", "states is float64"),
    (NeverEnds, "episode ends within max_episode_steps", "max_episode_steps=50"),
    (NaNReward, "chunk-step rules", "NaN"),
])
def test_broken_plugin_is_named(env_cls, check, words):
    found = failures(env_cls, max_episode_steps=50)
    assert check in found, found
    assert words in found[check]
    assert "fix:" in found[check]


def test_black_frames_fail():
    found = failures(BlackCamera, obs_mode="rgb", max_episode_steps=20)
    assert "black" in found["rendered frames not black"]


def test_unknown_id_fails_with_suggestion(capsys):
    assert main(["Reech-v0"]) == 1
    out = capsys.readouterr().out
    assert "did you mean 'Reach-v0'" in out and "FAIL" in out


def test_chunk_rule_violations_of_a_batched_env_are_caught():
    from embodied.envs.chunked import ChunkedVectorEnv

    class Sloppy(ChunkedVectorEnv):
        """Reports rewards on sub-steps it never ran."""

        def __init__(self, num_envs, auto_reset, obs_mode, max_episode_steps):
            super().__init__([lambda: Seeded(terminate_at=3)] * num_envs, auto_reset=auto_reset)

        def chunk_step(self, actions):
            result = super().chunk_step(actions)
            result.rewards[~result.executed] = 1.0
            return result

    found = failures(Sloppy, max_episode_steps=50)
    assert "rewards or done flags set on sub-steps that did not run" in found["chunk-step rules"]

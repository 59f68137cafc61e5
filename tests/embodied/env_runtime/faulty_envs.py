"""Simulators written for `embodied check-env`'s tests, each with one mistake (tests/embodied/env_runtime/
test_check_env.py names each by ``module:Class``, as a user names their env, and finds its tracebacks here)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from tests.toy_batched import PointMassBatch
from tests.toy_envs import CountingEnv

from embodied.envs.chunked import ChunkedVectorEnv


class Seeded(CountingEnv):
    """CountingEnv whose observation depends only on the seed (so determinism holds)."""

    def _obs(self):
        return {"states": np.array([self.t, self.first_seed, self.np_random.random()], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        self.first_seed = -1
        return super().reset(seed=seed, options=options)

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[: 1 + self.t % 8, :, 1] = 200
        return frame


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


class Float64Space(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, render_mode=None):
        super().__init__(max_episode_steps=max_episode_steps, render_mode=render_mode)
        self.observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-1e9, 1e9, (3,), np.float64)})


class MisnamedKey(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, render_mode=None):
        super().__init__(max_episode_steps=max_episode_steps, render_mode=render_mode)
        self.observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1e9, 1e9, (3,), np.float32)})

    def _obs(self):
        return {"state": super()._obs()["states"]}


class DiscreteActions(gym.Env):
    """A plain gymnasium class (no obs_mode): it goes through the adapter, which refuses Discrete actions."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)


class NotAnEnv:
    def reset(self):
        return {}


class NeverEnds(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, render_mode=None):
        super().__init__(render_mode=render_mode)  # ignores the time limit


class NaNReward(Seeded):
    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float("nan"), terminated, truncated, info


class NaNObs(Seeded):
    def _obs(self):
        states = super()._obs()["states"]
        if self.t >= 3:
            states[2] = np.nan
        return {"states": states}


class BlackCamera(Seeded):
    def __init__(self, obs_mode: str = "rgb", max_episode_steps: int = 0, render_mode=None):
        super().__init__(max_episode_steps=max_episode_steps, render_mode=render_mode)
        self.observation_space = gym.spaces.Dict({"main_images": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})

    def _obs(self):
        return {"main_images": np.zeros((8, 8, 3), dtype=np.uint8)}


class IgnoresSeed(Seeded):
    def _obs(self):
        return {"states": np.array([self.t, 0.0, np.random.random()], dtype=np.float32)}


class CrashInInit(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        raise RuntimeError("the simulator's licence file is missing")


class CrashOnReset(Seeded):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("could not load the scene")


class CrashInStep(Seeded):
    def step(self, action):
        return {"states": np.zeros(3, np.float32)}, 1 / 0, False, False, {}


class NeedsArg(Seeded):
    def __init__(self, obs_mode: str, max_episode_steps: int, robot: str):
        super().__init__(max_episode_steps=max_episode_steps)


class UntypedSpeed(Seeded):
    def __init__(self, obs_mode="state", max_episode_steps=0, speed=0.1):
        super().__init__(max_episode_steps=max_episode_steps)
        self.speed = speed

    def step(self, action):
        self.position = self.speed * np.asarray(action)  # a str speed breaks here
        return super().step(action)


class NoRenderMode(Seeded):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0):
        super().__init__(max_episode_steps=max_episode_steps)


class FloatFrames(Seeded):
    def render(self):
        return np.full((8, 8, 3), 0.5)


class BlackFrames(Seeded):
    def render(self):
        return np.zeros((8, 8, 3), np.uint8)


class NoTask(Seeded):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.task_description = ""


class IgnoresAutoResetOff(PointMassBatch):
    def __init__(self, num_envs, auto_reset=True, **kwargs):
        super().__init__(num_envs, auto_reset=True, **kwargs)


class NoFinalObs(PointMassBatch):
    def chunk_step(self, actions):
        result = super().chunk_step(actions)
        result.final_obs = None
        return result


class NaNFinalObs(PointMassBatch):
    def chunk_step(self, actions):
        result = super().chunk_step(actions)
        if result.final_obs is not None:
            result.final_obs["states"][:, 0] = np.inf
        return result


class BatchIgnoresSeed(PointMassBatch):
    def reset(self, seed=None):
        return super().reset(seed=None)


class BatchBlackRender(PointMassBatch):
    def render(self):
        return [np.zeros((8, 8, 3), np.uint8)] * self.num_envs


class BatchNeverEnds(PointMassBatch):
    def __init__(self, num_envs, auto_reset=True, obs_mode="state", max_episode_steps=50, **kwargs):
        super().__init__(num_envs, auto_reset, obs_mode, 10**9, success_threshold=-1.0, **kwargs)


class BatchFloat64(PointMassBatch):
    def _obs(self):
        return {**super()._obs(), "states": super()._obs()["states"].astype(np.float64)}


class PlainNoSuccess(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


class Sloppy(ChunkedVectorEnv):
    """Reports rewards on sub-steps it never ran."""

    def __init__(self, num_envs, auto_reset, obs_mode, max_episode_steps):
        super().__init__([lambda: Seeded(terminate_at=3)] * num_envs, auto_reset=auto_reset)

    def chunk_step(self, actions):
        result = super().chunk_step(actions)
        result.rewards[~result.executed] = 1.0
        return result


class MisnamedBatch(PointMassBatch):
    def _obs(self):
        obs = super()._obs()
        return {"state": obs.pop("states"), **obs}

    def __init__(self, num_envs, **kwargs):
        super().__init__(num_envs, **kwargs)
        self.single_observation_space = gym.spaces.Dict({"state": self.single_observation_space["states"]})

"""Tiny deterministic envs that pin the engine's contracts without a simulator."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """State = [step count, episode index]; reward = action[0] (so tests can read what ran).

    The episode terminates at step ``terminate_at`` and is truncated at ``truncate_at``
    (whichever comes first; 0 disables); ``success`` is true from step ``success_at`` on.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, terminate_at: int = 0, truncate_at: int = 0, success_at: int = 10**9, action_dim: int = 2,
                 render_mode: str | None = None) -> None:
        self.terminate_at, self.truncate_at, self.success_at = terminate_at, truncate_at, success_at
        self.observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-1e6, 1e6, (2,), np.float32)})
        self.action_space = gym.spaces.Box(-10.0, 10.0, (action_dim,), np.float32)
        self.render_mode = render_mode
        self.t = 0
        self.episode = -1
        self.task_description = "count"

    def _obs(self) -> dict:
        return {"states": np.array([self.t, self.episode], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {"success": False}

    def step(self, action):
        self.t += 1
        terminated = self.terminate_at > 0 and self.t >= self.terminate_at
        truncated = self.truncate_at > 0 and self.t >= self.truncate_at and not terminated
        success = self.t >= self.success_at
        return self._obs(), float(action[0]), terminated, truncated, {"success": success}

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = min(255, 20 * self.t)
        return frame

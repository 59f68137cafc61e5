# file: docs/examples/my_sim/point_reach.py
"""A 2-D point mass that must reach a goal: a simulator of your own, in plain numpy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class PointReachEnv(gym.Env):
    """Move a point in the unit square to a random goal; actions are velocity commands."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 40, render_mode: str | None = None,
                 speed: float = 0.1) -> None:
        if obs_mode != "state":
            raise ValueError(f"obs_mode: PointReachEnv supports only 'state', got {obs_mode!r}")
        self.max_episode_steps, self.render_mode, self.speed = max_episode_steps, render_mode, speed
        self.observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-2.0, 2.0, (4,), np.float32)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.task_description = "move the point to the goal"

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # all randomness below comes from self.np_random
        self.pos = self.np_random.uniform(0.0, 1.0, 2)
        self.goal = self.np_random.uniform(0.0, 1.0, 2)
        self.t = 0
        return self._obs(), {"success": False}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self.pos = np.clip(self.pos + self.speed * action, 0.0, 1.0)
        self.t += 1
        distance = float(np.linalg.norm(self.goal - self.pos))
        success = distance < 0.08
        truncated = self.t >= self.max_episode_steps and not success
        return self._obs(), -distance, success, truncated, {"success": success}

    def _obs(self) -> dict:
        return {"states": np.concatenate([self.pos, self.goal - self.pos]).astype(np.float32)}

    def render(self):
        frame = np.full((64, 64, 3), 255, dtype=np.uint8)
        for (x, y), colour in ((self.goal, (220, 40, 40)), (self.pos, (40, 40, 220))):
            i, j = int(y * 60) + 2, int(x * 60) + 2
            frame[max(i - 2, 0) : i + 2, max(j - 2, 0) : j + 2] = colour
        return frame

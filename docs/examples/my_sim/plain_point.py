# file: docs/examples/my_sim/plain_point.py
"""A plain gymnasium env, as most people already have one: Box observations, its own time limit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class PlainPointEnv(gym.Env):
    """Move a point in the unit square to a goal. Nothing here knows about embodied."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, render_mode: str | None = None, max_steps: int = 100, speed: float = 0.1) -> None:
        self.render_mode, self.max_steps, self.speed = render_mode, max_steps, speed
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos, self.goal = self.np_random.uniform(0.0, 1.0, 2), self.np_random.uniform(0.0, 1.0, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = np.clip(self.pos + self.speed * np.clip(action, -1.0, 1.0), 0.0, 1.0)
        self.t += 1
        distance = float(np.linalg.norm(self.goal - self.pos))
        reached = distance < 0.08
        return self._obs(), -distance, reached, self.t >= self.max_steps, {"is_success": reached}

    def render(self):
        frame = np.full((64, 64, 3), 255, dtype=np.uint8)
        for (x, y), colour in ((self.goal, (40, 160, 40)), (self.pos, (40, 40, 220))):
            i, j = int(y * 60) + 2, int(x * 60) + 2
            frame[i - 2 : i + 2, j - 2 : j + 2] = colour
        return frame

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.pos, self.goal - self.pos])

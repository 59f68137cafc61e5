"""Plain gymnasium classes, written as users already have them (not to embodied's convention).

``PointReach`` is the issue's case: Box observations, a constructor taking ``render_mode`` and its
own ``max_steps``. The others are one mistake or one variation each, for the adapter's tests.
"""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PointReach(gym.Env):
    """A point in [-1, 1]^2 moved by the action towards a goal; float64 Box observations [pos, goal]."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, max_steps: int = 200, speed: float = 0.1,
                 mode: Literal["easy", "hard"] = "easy") -> None:
        self.render_mode, self.max_steps, self.speed, self.mode = render_mode, max_steps, speed, mode
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.task_description = "move the point to the goal"
        self.pos, self.goal, self.t = np.zeros(2), np.zeros(2), 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.pos, self.goal])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, 0.5, 2)
        self.goal = self.np_random.uniform(-0.5, 0.5, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.pos = np.clip(self.pos + self.speed * np.asarray(action, dtype=np.float64), -1.0, 1.0)
        dist = float(np.linalg.norm(self.pos - self.goal))
        success = dist < 0.05
        return self._obs(), -dist, success, self.t >= self.max_steps, {"is_success": success}

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frame = np.full((32, 32, 3), 40, dtype=np.uint8)
        for xy, colour in ((self.goal, (0, 255, 0)), (self.pos, (255, 0, 0))):
            r, c = ((np.asarray(xy) + 1.0) / 2.0 * 31).astype(int)
            frame[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = colour
        return frame


class Cameras(gym.Env):
    """Dict observations: two uint8 cameras and float64 joints; success under the info key 'reached'."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Dict({
            "front": spaces.Box(0, 255, (12, 16, 3), np.uint8),
            "joints": spaces.Box(-1.0, 1.0, (3,), np.float64),
            "hand": spaces.Box(0, 255, (8, 8, 3), np.uint8),
        })
        self.action_space = spaces.Box(-1.0, 1.0, (3,), np.float64)
        self.joints, self.calls = np.zeros(3), 0

    def task_description(self) -> str:  # a callable, read at every reset
        return f"wave {self.calls}"

    def _obs(self) -> dict:
        return {"front": np.full((12, 16, 3), 100, np.uint8), "joints": self.joints.copy(),
                "hand": np.full((8, 8, 3), 200, np.uint8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.calls += 1
        self.joints = np.zeros(3)
        return self._obs(), {}

    def step(self, action):
        self.joints = np.clip(self.joints + 0.5 * np.asarray(action), -1.0, 1.0)
        return self._obs(), 0.0, False, False, {"reached": bool(self.joints[0] >= 1.0)}


class ChoosesDiscretely(PointReach):
    """A plain class with a Discrete action space."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode)
        self.action_space = spaces.Discrete(4)


class OwnConventionWrongKeys(gym.Env):
    """Takes obs_mode and max_episode_steps (embodied's convention) but names its keys its own way."""

    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 50) -> None:
        self.observation_space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32),
                                              "goal": spaces.Box(-1, 1, (2,), np.float32)})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)


class OwnConventionFloat64(OwnConventionWrongKeys):
    """embodied's convention with float64 states."""

    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 50) -> None:
        super().__init__(obs_mode, max_episode_steps)
        self.observation_space = spaces.Dict({"states": spaces.Box(-1, 1, (4,), np.float64)})


class HalfConvention(PointReach):
    """Takes obs_mode but not max_episode_steps: ambiguous."""

    def __init__(self, obs_mode: str = "state", render_mode: str | None = None) -> None:
        super().__init__(render_mode)


class NotAnEnv:
    """Has reset and step, but is no gymnasium.Env and follows no convention."""

    def __init__(self, size: int = 3) -> None:
        self.size = size

    def reset(self, seed=None):
        return np.zeros(self.size), {}

    def step(self, action):
        return np.zeros(self.size), 0.0, False, False, {}

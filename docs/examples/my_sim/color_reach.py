# file: docs/examples/my_sim/color_reach.py
"""Go to the dot the instruction names: images + an instruction, written to embodied's convention."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

COLOURS = {"red": (220, 40, 40), "blue": (40, 40, 220)}


class ColorReachEnv(gym.Env):
    """Two coloured dots; ``task_description`` names one. The image is the only place colours are seen."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, obs_mode: str = "rgb", max_episode_steps: int = 30, render_mode: str | None = None,
                 image_size: int = 64) -> None:
        if obs_mode not in ("rgb", "state+rgb"):
            raise ValueError(f"obs_mode: ColorReachEnv needs images ('rgb' or 'state+rgb'), got {obs_mode!r}")
        self.obs_mode, self.max_episode_steps, self.render_mode = obs_mode, max_episode_steps, render_mode
        self.size = image_size
        spaces = {"main_images": gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)}
        if obs_mode == "state+rgb":
            spaces["states"] = gym.spaces.Box(0.0, 1.0, (2,), np.float32)  # the agent's own position only
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.task_description = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(0.3, 0.7, 2)
        self.dots = {name: self.np_random.uniform(0.05, 0.95, 2) for name in COLOURS}
        self.target = str(self.np_random.choice(list(COLOURS)))
        self.task_description = f"go to the {self.target} dot"  # read at every reset
        self.t = 0
        return self._obs(), {"success": False}

    def step(self, action):
        self.pos = np.clip(self.pos + 0.08 * np.clip(action, -1.0, 1.0), 0.0, 1.0)
        self.t += 1
        distance = float(np.linalg.norm(self.dots[self.target] - self.pos))
        success = distance < 0.1
        truncated = self.t >= self.max_episode_steps and not success
        return self._obs(), -distance, success, truncated, {"success": success}

    def render(self):
        frame = np.full((self.size, self.size, 3), 255, dtype=np.uint8)
        for xy, colour in [*((self.dots[n], COLOURS[n]) for n in COLOURS), (self.pos, (30, 30, 30))]:
            i, j = (np.asarray(xy)[::-1] * (self.size - 4)).astype(int) + 2
            frame[i - 2 : i + 2, j - 2 : j + 2] = colour
        return frame

    def _obs(self) -> dict:
        obs = {"main_images": self.render()}
        if self.obs_mode == "state+rgb":
            obs["states"] = self.pos.astype(np.float32)
        return obs

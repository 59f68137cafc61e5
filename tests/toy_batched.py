"""A numpy ``BatchedEnv``: B point masses in the unit square, each moving towards its own goal.

It implements ``embodied.envs.batched.BatchedEnv`` directly (no per-env gymnasium objects), the way a GPU
simulator would, and honours the chunk-step contract of ``embodied.envs.chunked`` so tests can pin it.

``states`` (float32 [6]): position (2), goal (2), goal - position (2). An action (float32 [2] in
[-1, 1]) moves the point by ``speed * action``; the reward is ``-distance``; the episode terminates
when the distance falls below ``success_threshold`` (success) and is truncated after
``max_episode_steps`` sub-steps. ``pos``, ``goal`` and ``t`` are public so tests can place points.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

from embodied.core.types import MAIN_IMAGES, OBS_MODES, STATES, TASK_DESCRIPTIONS, ChunkStepResult, EpisodeStats, Obs


class PointMassBatch:
    """B independent 2-D point masses stepped as one numpy batch."""

    batched: ClassVar[bool] = True
    task_description: ClassVar[str] = "move the point to the goal"

    def __init__(self, num_envs: int, auto_reset: bool = True, obs_mode: str = "state", max_episode_steps: int = 50,
                 speed: float = 0.1, success_threshold: float = 0.05, image_size: int = 16,
                 render_mode: str | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        self.num_envs, self.auto_reset, self.obs_mode = num_envs, auto_reset, obs_mode
        self.max_episode_steps, self.speed, self.success_threshold = max_episode_steps, speed, success_threshold
        self.image_size, self.render_mode = image_size, render_mode
        spaces: dict[str, gym.Space] = {}
        if "state" in obs_mode:
            spaces[STATES] = gym.spaces.Box(-2.0, 2.0, (6,), np.float32)
        if "rgb" in obs_mode:
            spaces[MAIN_IMAGES] = gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        self.single_observation_space = gym.spaces.Dict(spaces)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = np.zeros((num_envs, 2))
        self.goal = np.zeros((num_envs, 2))
        self.t = np.zeros(num_envs, dtype=np.int64)  # sub-steps in the current episode
        self.finished = np.zeros(num_envs, dtype=bool)  # done and not reset (auto_reset off)
        self._rngs = [np.random.default_rng(i) for i in range(num_envs)]
        self._ret = np.zeros(num_envs)
        self._success_once = np.zeros(num_envs, dtype=bool)
        self._success_last = np.zeros(num_envs, dtype=bool)
        self._reset_called = False
        self.closed = False

    # -- the BatchedEnv protocol --------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self._rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        self._reset_envs(np.arange(self.num_envs))
        self.finished[:] = False
        self._reset_called = True
        return self._obs()

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        if not self._reset_called:
            raise RuntimeError("call reset() before chunk_step()")
        actions = np.asarray(actions, dtype=np.float32)
        if actions.ndim != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != 2 or actions.shape[1] < 1:
            raise ValueError(f"actions must have shape [{self.num_envs}, C, 2] (C >= 1), got {list(actions.shape)}")
        b, chunk = actions.shape[:2]
        rewards = np.zeros((b, chunk), dtype=np.float32)
        terminations = np.zeros((b, chunk), dtype=bool)
        truncations = np.zeros((b, chunk), dtype=bool)
        executed = np.zeros((b, chunk), dtype=bool)
        dones = np.zeros(b, dtype=bool)
        for c in range(chunk):
            live = ~(dones | self.finished)  # envs whose episode has not ended (in this chunk or before)
            if not live.any():
                break
            step = np.clip(actions[:, c], -1.0, 1.0) * self.speed
            self.pos[live] = np.clip(self.pos[live] + step[live], 0.0, 1.0)
            self.t[live] += 1
            dist = self._distance()
            success = dist < self.success_threshold
            terminated = live & success
            truncated = live & ~terminated & (self.t >= self.max_episode_steps)
            executed[:, c] = live
            rewards[live, c] = -dist[live]
            terminations[:, c], truncations[:, c] = terminated, truncated
            self._ret[live] -= dist[live]
            self._success_once[live] |= success[live]
            self._success_last[live] = success[live]
            dones |= terminated | truncated
        episodes = [EpisodeStats(int(i), float(self._ret[i]), int(self.t[i]), bool(self._success_once[i]),
                                 bool(self._success_last[i])) for i in np.flatnonzero(dones)]
        final_obs = None
        if dones.any():
            final_obs = self._obs()  # terminal rows where done; next obs elsewhere (unchanged below)
            if self.auto_reset:
                self._reset_envs(np.flatnonzero(dones))
            else:
                self.finished |= dones
        return ChunkStepResult(self._obs(), rewards, terminations, truncations, executed, dones, final_obs, episodes)

    def render(self) -> list[np.ndarray]:
        return [self._image(i, max(self.image_size, 32)) for i in range(self.num_envs)]

    def close(self) -> None:
        self.closed = True

    # -- internals ----------------------------------------------------------------------------

    def _reset_envs(self, index: np.ndarray) -> None:
        for i in index:
            rng = self._rngs[i]
            self.pos[i] = rng.uniform(0.0, 1.0, 2)
            while True:  # no episode is won at reset
                self.goal[i] = rng.uniform(0.0, 1.0, 2)
                if np.linalg.norm(self.goal[i] - self.pos[i]) > 2 * self.success_threshold:
                    break
        self.t[index] = 0
        self._ret[index] = 0.0
        self._success_once[index] = False
        self._success_last[index] = False

    def _distance(self) -> np.ndarray:
        return np.linalg.norm(self.goal - self.pos, axis=1)

    def _obs(self) -> Obs:
        obs: Obs = {}
        if "state" in self.obs_mode:
            obs[STATES] = np.concatenate([self.pos, self.goal, self.goal - self.pos], axis=1).astype(np.float32)
        if "rgb" in self.obs_mode:
            obs[MAIN_IMAGES] = np.stack([self._image(i, self.image_size) for i in range(self.num_envs)])
        obs[TASK_DESCRIPTIONS] = [self.task_description] * self.num_envs
        return obs

    def _image(self, i: int, size: int) -> np.ndarray:
        """Black square, green goal pixel, red point pixel (y up)."""
        frame = np.zeros((size, size, 3), dtype=np.uint8)
        for xy, channel in ((self.goal[i], 1), (self.pos[i], 0)):
            col, row = (np.clip(xy, 0.0, 1.0) * (size - 1)).round().astype(int)
            frame[size - 1 - row, col, channel] = 255
        return frame

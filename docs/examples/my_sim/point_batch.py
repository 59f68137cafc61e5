# file: docs/examples/my_sim/point_batch.py
"""A batched simulator: one object steps every env at once (a GPU simulator has this shape)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from embodied.api import ChunkStepResult, EpisodeStats


class PointBatchEnv:
    """``num_envs`` points in the unit square reaching goals, stepped as arrays."""

    batched = True  # the env worker builds this class once per env rank, with num_envs

    def __init__(self, num_envs: int, auto_reset: bool = True, obs_mode: str = "state", max_episode_steps: int = 40,
                 render_mode: str | None = None, speed: float = 0.1) -> None:
        if obs_mode != "state":
            raise ValueError(f"obs_mode: PointBatchEnv supports only 'state', got {obs_mode!r}")
        self.num_envs, self.auto_reset, self.max_steps, self.speed = num_envs, auto_reset, max_episode_steps, speed
        self.single_observation_space = gym.spaces.Dict({"states": gym.spaces.Box(-2.0, 2.0, (4,), np.float32)})
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.rngs = [np.random.default_rng() for _ in range(num_envs)]
        self.pos, self.goal = np.zeros((num_envs, 2)), np.zeros((num_envs, 2))
        self.t, self.ret = np.zeros(num_envs, int), np.zeros(num_envs)
        self.finished = np.zeros(num_envs, bool)  # done and not reset (auto_reset off)

    def reset(self, seed: int | None = None) -> dict:
        self.rngs = [np.random.default_rng(None if seed is None else seed + i) for i in range(self.num_envs)]
        self._reset(np.arange(self.num_envs))
        self.finished[:] = False
        return self._obs()

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        b, c = actions.shape[:2]
        rewards, executed = np.zeros((b, c), np.float32), np.zeros((b, c), bool)
        terminations, truncations = np.zeros((b, c), bool), np.zeros((b, c), bool)
        done = self.finished.copy()  # envs already done execute nothing
        for k in range(c):
            live = ~done
            self.pos[live] = np.clip(self.pos[live] + self.speed * np.clip(actions[live, k], -1, 1), 0.0, 1.0)
            self.t[live] += 1
            distance = np.linalg.norm(self.goal - self.pos, axis=1)
            rewards[live, k], executed[live, k] = -distance[live], True
            terminations[live, k] = distance[live] < 0.08
            truncations[live, k] = (self.t[live] >= self.max_steps) & ~terminations[live, k]
            self.ret[live] -= distance[live]
            done |= terminations[:, k] | truncations[:, k]
        ended = np.flatnonzero(done & ~self.finished)
        episodes = [EpisodeStats(int(i), float(self.ret[i]), int(self.t[i]), bool(terminations[i].any()),
                                 bool(terminations[i].any())) for i in ended]
        final_obs = self._obs() if len(ended) else None  # terminal rows, before any reset
        if self.auto_reset:
            self._reset(ended)
        else:
            self.finished[ended] = True
        dones = np.isin(np.arange(b), ended)
        return ChunkStepResult(self._obs(), rewards, terminations, truncations, executed, dones, final_obs, episodes)

    def render(self) -> list[np.ndarray]:
        frames = np.full((self.num_envs, 64, 64, 3), 255, dtype=np.uint8)
        for i in range(self.num_envs):
            for (x, y), colour in ((self.goal[i], (40, 160, 40)), (self.pos[i], (40, 40, 220))):
                r, c = int(y * 60) + 2, int(x * 60) + 2
                frames[i, r - 2 : r + 2, c - 2 : c + 2] = colour
        return list(frames)

    def close(self) -> None:
        pass

    def _reset(self, index: np.ndarray) -> None:
        for i in index:
            self.pos[i], self.goal[i] = self.rngs[i].uniform(0.0, 1.0, 2), self.rngs[i].uniform(0.0, 1.0, 2)
        self.t[index], self.ret[index] = 0, 0.0

    def _obs(self) -> dict:
        states = np.concatenate([self.pos, self.goal - self.pos], axis=1).astype(np.float32)
        return {"states": states, "task_descriptions": ["move the point to the goal"] * self.num_envs}

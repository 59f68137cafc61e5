"""``EnvWorker``: steps the envs of one env rank and trades shards with its rollout ranks."""

from __future__ import annotations

import numpy as np
import torch

from embodied.config import EnvConfig
from embodied.env_factory import make_vector_env, policy_spec
from embodied.policy import PolicySpec
from embodied.types import obs_slice
from embodied.workers.link import Link


class EnvWorker:
    """Owns the vector env (a ``BatchedEnv``) of its slice of the batch; does nothing but step it."""

    def __init__(self, rank: int, env_cfg: EnvConfig, link: Link, seed: int, torch_threads: int = 1,
                 section: str = "env") -> None:
        torch.set_num_threads(torch_threads)
        self.rank, self.link, self.seed = rank, link, seed
        self.venv = make_vector_env(env_cfg, link.num_envs, section, name=f"{env_cfg.id}[env rank {rank}]")
        self.obs = self.venv.reset(seed=seed + link.start)

    def spec(self) -> PolicySpec:
        """Observation and action layout, for building the policy."""
        return policy_spec(self.venv.single_observation_space, self.venv.single_action_space)

    def run_epoch(self, chunk_steps: int, reset_seed: int | None = None) -> int:
        """Send the current obs, then answer ``chunk_steps`` action chunks; returns sub-steps run.

        ``reset_seed`` resets every env first (env ``i`` of the batch gets ``reset_seed + i``),
        which eval uses to replay a fixed set of initial states.
        """
        if reset_seed is not None:
            self.obs = self.venv.reset(seed=reset_seed + self.link.start)
        for shard in self.link.shards:
            self.link.to_rollout.put(Link.key(shard), obs_slice(self.obs, *self.link.local(shard)))
        executed = 0
        for _ in range(chunk_steps):
            actions = np.concatenate(
                [self.link.to_env.get(Link.key(s), timeout=self.link.timeout) for s in self.link.shards]
            )
            result = self.venv.chunk_step(actions)
            for shard in self.link.shards:
                self.link.to_rollout.put(Link.key(shard), result.slice(*self.link.local(shard)))
            self.obs = result.obs
            executed += int(result.executed.sum())
        return executed

    def close(self) -> None:
        self.venv.close()


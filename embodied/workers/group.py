"""``Workers``: the worker groups of one run, wired by channels, and what the runner asks of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from embodied.channels import route, shards_for_env_rank, shards_for_rollout_rank
from embodied.config import Config, EnvConfig
from embodied.placement import Backend, LocalBackend, WorkerGroup
from embodied.policy import PolicySpec
from embodied.types import EpisodeStats, Trajectory
from embodied.workers.actor_worker import ActorWorker
from embodied.workers.env_worker import EnvWorker
from embodied.workers.link import Link
from embodied.workers.rollout_worker import MultiStepRolloutWorker

EVAL_SEED_OFFSET = 1_000_000  # eval initial states never coincide with training ones


@dataclass
class Workers:
    """Env, eval-env, rollout and actor groups of one run."""

    cfg: Config
    backend: Backend
    env_group: WorkerGroup
    eval_group: WorkerGroup
    rollout_group: WorkerGroup
    actor_group: WorkerGroup  # one rank
    spec: PolicySpec
    colocated: bool  # rollout workers act with the actor's own module

    @classmethod
    def start(cls, cfg: Config, backend: Backend) -> Workers:
        """Create channels and workers; envs are built (and fail) before the policy is."""
        c = cfg.cluster
        env_group, env_rollout_links = _env_group(cfg, backend, cfg.env, "env", cfg.experiment.seed)
        eval_cfg = cfg.resolved_eval_env()
        eval_group, eval_rollout_links = _env_group(cfg, backend, eval_cfg, "eval_env",
                                                    cfg.experiment.seed + EVAL_SEED_OFFSET)
        spec = backend.wait(env_group.call("spec"))[0]
        actor = backend.create(ActorWorker, [(cfg.policy, spec, cfg.algorithm, cfg.actor, cfg.runner.iterations,
                                              cfg.experiment.seed, c.torch_threads)])
        colocated = isinstance(backend, LocalBackend)
        shared = actor.workers[0].policy if colocated else None
        rollout = backend.create(MultiStepRolloutWorker, [
            (r, cfg.policy, spec, env_rollout_links[r], eval_rollout_links[r], shared, c.torch_threads)
            for r in range(c.num_rollout_workers)
        ])
        return cls(cfg, backend, env_group, eval_group, rollout, actor, spec, colocated)

    def sync_weights(self) -> int:
        """Publish the actor's weights to every rollout worker; returns the version."""
        weights = self.actor_group.call("weights", self.colocated)[0]  # a handle: Ray ships it once, by reference
        return self.backend.wait(self.rollout_group.call("sync_weights", weights))[0]

    def rollout(self, chunk_steps: int) -> list[Trajectory]:
        """One rollout epoch: env and rollout workers trade shards for ``chunk_steps`` chunk steps."""
        env_handles = self.env_group.call("run_epoch", chunk_steps, None)
        trajectories = self.backend.wait(self.rollout_group.call("rollout_epoch", chunk_steps))
        self.backend.wait(env_handles)
        return trajectories

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        return self.backend.wait(self.actor_group.call("update", trajectories, iteration))[0]

    def evaluate(self, episodes: int) -> list[EpisodeStats]:
        """Greedy episodes from a fixed set of eval seeds, ``eval_env.num_envs`` at a time."""
        eval_cfg = self.cfg.resolved_eval_env()
        chunk_steps = math.ceil(eval_cfg.max_episode_steps / self.cfg.policy.action_chunk)
        base = self.cfg.experiment.seed + EVAL_SEED_OFFSET
        stats: list[EpisodeStats] = []
        for round_ in range(math.ceil(episodes / eval_cfg.num_envs)):
            env_handles = self.eval_group.call("run_epoch", chunk_steps, base + round_ * eval_cfg.num_envs)
            for part in self.backend.wait(self.rollout_group.call("eval_epoch", chunk_steps)):
                stats += part
            self.backend.wait(env_handles)
        return stats

    def actor_state(self) -> dict[str, Any]:
        return self.backend.wait(self.actor_group.call("state"))[0]

    def close(self) -> None:
        for group in (self.env_group, self.eval_group):
            self.backend.wait(group.call("close"))


def _env_group(cfg: Config, backend: Backend, env_cfg: EnvConfig, section: str,
               seed: int) -> tuple[WorkerGroup, list[Link]]:
    """Env workers over ``env_cfg`` and, per rollout rank, that rank's side of the exchange."""
    c = cfg.cluster
    shards = route(env_cfg.num_envs, c.num_env_workers, c.num_rollout_workers)
    to_rollout, to_env = backend.channel(f"{section}-obs"), backend.channel(f"{section}-actions")
    env_links = [Link(shards_for_env_rank(shards, e), to_rollout, to_env) for e in range(c.num_env_workers)]
    group = backend.create(EnvWorker, [(e, env_cfg, env_links[e], seed, c.torch_threads, section)
                                       for e in range(c.num_env_workers)])
    rollout_links = [Link(shards_for_rollout_rank(shards, r), to_rollout, to_env)
                     for r in range(c.num_rollout_workers)]
    return group, rollout_links

"""``MultiStepRolloutWorker``: runs the policy for its env shards and records trajectories."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from embodied.channels import Shard
from embodied.policy import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.types import (ChunkStepResult, EpisodeStats, Obs, PeerFailure, PeerFailureError, PolicyOutput,
                            Trajectory, obs_concat)
from embodied.workers.link import Link


class MultiStepRolloutWorker:
    """Merges obs shards from its env ranks, acts, splits the action chunk back, records.

    With ``shared_policy`` (colocated placement) it acts with the actor's own module and a weight
    sync copies nothing; otherwise it builds its own copy and loads published weights. ``train`` is
    None for eval-only runs (``embodied eval``), ``evaluation`` None when there are no eval envs.
    """

    def __init__(self, rank: int, policy_cfg: PolicyConfig, spec: PolicySpec, train: Link | None,
                 evaluation: Link | None,
                 shared_policy: Policy | None = None, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        self.rank, self.train, self.evaluation = rank, train, evaluation
        self.policy = shared_policy if shared_policy is not None else build_policy(policy_cfg, spec)
        self.version = -1

    def sync_weights(self, weights: tuple[int, dict[str, torch.Tensor] | None]) -> int:
        """Load ``(version, state_dict)``; a None state means the module is shared with the actor."""
        version, state = weights
        if state is not None:
            self.policy.load_state_dict(state)
        self.version = version
        return version

    @torch.no_grad()
    def rollout_epoch(self, chunk_steps: int) -> Trajectory:
        """``chunk_steps`` sampled chunk steps over the training envs, as a trajectory."""
        if self.train is None:
            raise RuntimeError(f"rollout rank {self.rank} has no training envs")
        steps: list[tuple[PolicyOutput, ChunkStepResult, torch.Tensor]] = []
        with self._failure_sent_to_peers(self.train):
            obs = self._recv_obs(self.train)
            for _ in range(chunk_steps):
                out = self._act(obs, deterministic=False)
                result = self._exchange(self.train, out)
                steps.append((out, result, self._final_values(result)))
                obs = result.obs
        return self._trajectory(steps, self.policy.value(obs).float())

    @torch.no_grad()
    def eval_epoch(self, chunk_steps: int) -> list[EpisodeStats]:
        """``chunk_steps`` greedy chunk steps over the eval envs; the episodes that ended."""
        if self.evaluation is None:
            raise RuntimeError(f"rollout rank {self.rank} has no eval envs")
        episodes: list[EpisodeStats] = []
        with self._failure_sent_to_peers(self.evaluation):
            obs = self._recv_obs(self.evaluation)
            for _ in range(chunk_steps):
                result = self._exchange(self.evaluation, self._act(obs, deterministic=True))
                episodes += result.episodes
                obs = result.obs
        return episodes

    # -- internals ---------------------------------------------------------------------------

    @contextmanager
    def _failure_sent_to_peers(self, link: Link) -> Iterator[None]:
        """On an error of our own, tell the env ranks at once rather than leave them waiting out the timeout."""
        try:
            yield
        except PeerFailureError:
            raise  # an env rank failed: it knows
        except Exception as exc:
            for shard in link.shards:
                link.to_env.put(Link.key(shard), PeerFailure(f"rollout worker {self.rank} failed: {exc!r}"))
            raise

    def _act(self, obs: Obs, deterministic: bool) -> PolicyOutput:
        out = self.policy.act(obs, deterministic=deterministic)
        out.version = self.version
        return out

    def _recv_obs(self, link: Link) -> Obs:
        return obs_concat([_get(link, s) for s in link.shards])

    def _exchange(self, link: Link, out: PolicyOutput) -> ChunkStepResult:
        """Send each env rank its rows of the action chunk; merge what comes back."""
        actions = out.actions.detach().cpu().numpy().astype(np.float32)
        offset = 0
        for shard in link.shards:
            link.to_env.put(Link.key(shard), actions[offset : offset + shard.size])
            offset += shard.size
        return ChunkStepResult.concat([_get(link, s) for s in link.shards])

    def _final_values(self, result: ChunkStepResult) -> torch.Tensor:
        """V(final_obs) where an episode was truncated (bootstrap), 0 elsewhere."""
        truncated = torch.as_tensor(result.truncated)
        if result.final_obs is None or not truncated.any():
            return torch.zeros(len(truncated))
        return torch.where(truncated, self.policy.value(result.final_obs).float(), 0.0)

    def _trajectory(self, steps: list, next_values: torch.Tensor) -> Trajectory:
        outs = [s[0] for s in steps]
        results: list[ChunkStepResult] = [s[1] for s in steps]

        def stack(arrays: list) -> torch.Tensor:
            return torch.stack([torch.as_tensor(a) for a in arrays])

        return Trajectory(
            forward_inputs={k: stack([o.forward_inputs[k] for o in outs]) for k in outs[0].forward_inputs},
            actions=stack([o.actions for o in outs]).float(),
            logprobs=stack([o.logprobs for o in outs]),
            values=stack([o.values for o in outs]).float(),
            rewards=stack([r.rewards for r in results]).float(),
            executed=stack([r.executed for r in results]),
            dones=stack([r.dones for r in results]),
            terminated=stack([r.terminated for r in results]),
            final_values=torch.stack([s[2] for s in steps]),
            next_values=next_values,
            version=self.version,
            episodes=[e for r in results for e in r.episodes],
        )


def _get(link: Link, shard: Shard) -> Any:
    """The next item from ``shard``'s env rank; raises if that rank reported a failure."""
    item = link.to_rollout.get(Link.key(shard), timeout=link.timeout)
    if isinstance(item, PeerFailure):
        raise PeerFailureError(item.message)
    return item

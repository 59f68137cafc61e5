"""``MultiStepRolloutWorker``: runs the policy for its env shards and records trajectories."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch

from embodied.channels import Channel, ChannelTimeout, Shard
from embodied.checkpoint.store import load_policy_state
from embodied.config import AlgorithmConfig
from embodied.core import rng
from embodied.core.timing import Busy
from embodied.core.numerics import NonFinitePolicyError, non_finite_outputs
from embodied.core.types import (ChunkStepResult, EpisodeStats, Obs, PeerFailure, PeerFailureError, PolicyOutput,
                                 RolloutSummary, Trajectory, obs_concat, obs_rows, obs_slice)
from embodied.policy.base import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.workers.link import Link


class MultiStepRolloutWorker:
    """Merges obs shards from its env ranks, acts, splits the action chunk back, records.

    With ``shared_policy`` (colocated placement) it acts with the actor's own module and a weight
    sync copies nothing; otherwise it builds its own copy and loads published weights. ``train`` is
    None for eval-only runs (``embodied eval``), ``evaluation`` None when there are no eval envs.
    """

    # Methods a backend runs beside the worker's other calls (not queued behind them): in an async run the actor
    # asks for epoch k's trajectory while epoch k + 1 is being rolled out.
    concurrent_methods: ClassVar[tuple[str, ...]] = ("send_trajectory", "take_busy")

    def __init__(self, rank: int, policy_cfg: PolicyConfig, spec: PolicySpec, train: Link | None,
                 evaluation: Link | None,
                 shared_policy: Policy | None = None, torch_threads: int = 1, seed: int | None = None,
                 weights_inbox: Channel | None = None, hold_epochs: int = 2,
                 recorder: AlgorithmConfig | None = None, bootstrap_terminations: bool = False) -> None:
        torch.set_num_threads(torch_threads)
        # The actions are sampled from this worker's own stream, seeded per rank (embodied.core.rng): a run
        # repeats exactly for a fixed experiment.seed on Ray and on the local backend, where the workers are
        # threads of one process and torch's global generator is the actor's.
        own_seed = None if seed is None else seed + 1_000_003 * (rank + 1)
        self.stream = None if own_seed is None else rng.RandomStream(own_seed)
        self.rank, self.train, self.evaluation = rank, train, evaluation
        self.busy = Busy()  # seconds acting, waiting, sending and syncing since the driver last asked (take_busy)
        # Off-policy runs: trajectories carry the observations too, as the algorithm records them
        # (``AlgorithmConfig.replay_record``; on-policy runs need only the policy's forward_inputs).
        self.recorder = recorder
        # V(final_obs) is computed where an episode was truncated, and also where it terminated when the algorithm
        # bootstraps terminations (``AlgorithmConfig.bootstraps_terminations``).
        self.bootstrap_terminations = bootstrap_terminations
        # Async runs: the actor's newest weights arrive here (key ``weights_key``) while an epoch runs,
        # and are loaded between chunk steps; each chunk step records the version it acted with.
        self.weights_inbox, self.weights_key = weights_inbox, f"rollout{rank}"
        if weights_inbox is not None:
            try:  # claim the key now (Ray: the newest weights are then delivered into this process)
                weights_inbox.get(self.weights_key, timeout=0)
            except ChannelTimeout:
                pass
        if shared_policy is not None:
            self.policy = shared_policy
        elif own_seed is None:
            self.policy = build_policy(policy_cfg, spec)
        else:  # its init under its own seed, not drawn from the actor's stream (the weights come by sync anyway)
            with rng.seeded(own_seed):
                self.policy = build_policy(policy_cfg, spec)
        self.version = -1
        # Epochs' trajectories until the actor asks for them (``send_trajectory``): ``hold_epochs`` at most (an
        # async run has up to ``algorithm.max_staleness + 1`` in flight); one never sent (a benchmark's) is
        # dropped when newer ones come.
        self.held: dict[int, Trajectory] = {}
        self.hold_epochs = hold_epochs
        self._held_lock = threading.Lock()  # send_trajectory runs beside rollout_epoch (concurrent_methods)

    def take_busy(self) -> dict[str, float]:
        """Seconds spent acting, waiting for env results, sending chunks and loading weights since the last call
        (``embodied.core.timing``)."""
        return self.busy.take()

    def relink(self, section: str, generation: int) -> None:
        """Exchange with the ``section`` ("env" or "eval_env") envs on the keys of ``generation``
        (after failed env workers were replaced)."""
        link = self.train if section == "env" else self.evaluation
        if link is not None:
            link.move_to(generation)

    def rng_state(self) -> dict[str, torch.Tensor] | torch.Tensor:
        """The state of the stream the actions are sampled from, for exact resume (without a seed: the global
        generator's)."""
        return torch.get_rng_state() if self.stream is None else self.stream.get_state()

    def set_rng_state(self, state: dict[str, torch.Tensor] | torch.Tensor) -> None:
        """Restore ``rng_state()``; a bare tensor (a checkpoint of before the streams) is the CPU generator's."""
        if self.stream is None:
            torch.set_rng_state(state if isinstance(state, torch.Tensor) else state["cpu"])
        else:
            self.stream.set_state(state)

    def sync_weights(self, weights: tuple[int, dict[str, torch.Tensor] | None], skip_older: bool = False) -> int:
        """Load ``(version, state_dict)``; a None state means the module is shared with the actor.
        Returns the version held.

        Versions only go forward: weights older than the ones held (a late message) are refused,
        or, with ``skip_older`` (async runs, where an eval may have sent newer ones first), ignored.
        """
        version, state = weights
        if version <= self.version and skip_older:  # the same version holds the same weights
            return self.version
        if version < self.version:
            raise ValueError(f"rollout worker {self.rank}: refusing weights of version {version}, older than the "
                             f"version {self.version} it holds")
        if state is not None:
            _, unexpected = self.policy.load_state_dict(state, strict=False)  # trainable tensors only
            if unexpected:
                raise ValueError(f"rollout worker {self.rank}: weights for unknown parameters {unexpected[:5]}")
        self.version = version
        return version

    def load_checkpoint(self, actor_state: dict[str, Any], version: int = 0) -> int:
        """Load a checkpoint's policy (its exported folder, or its state dict), e.g. for ``embodied eval``."""
        load_policy_state(self.policy, actor_state)
        self.version = version
        return version

    @torch.no_grad()
    def rollout_epoch(self, chunk_steps: int, epoch: int = 0) -> RolloutSummary:
        """``chunk_steps`` sampled chunk steps over the training envs: the trajectory is held here as epoch
        ``epoch`` (a redone epoch replaces it) and its summary returned."""
        if self.train is None:
            raise RuntimeError(f"rollout rank {self.rank} has no training envs")
        with self._failure_sent_to_peers(self.train):
            steps, first, obs = self._run(self.train, chunk_steps, deterministic=False, new_weights=True)
            recorded = [(out, result, self._final_values(result)) for out, result in steps]
        trajectory = self._trajectory(recorded, self.policy.value(obs).float())
        if self.recorder is not None:
            trajectory.observations, trajectory.next_observations = _observations(
                partial(self.recorder.replay_record, self.policy), first, steps, obs)
        with self._held_lock:
            self.held[epoch] = trajectory
            while len(self.held) > self.hold_epochs:
                del self.held[min(self.held)]
        return RolloutSummary.of(trajectory, epoch)

    def send_trajectory(self, epoch: int, outbox: Channel, actor_rank: int) -> None:
        """Put epoch ``epoch``'s trajectory on ``outbox`` for actor rank ``actor_rank`` (key ``actor<rank>``),
        tagged with this rank, and let it go."""
        with self._held_lock:
            if epoch not in self.held:
                raise RuntimeError(f"rollout rank {self.rank}: no trajectory of epoch {epoch} is held (held: "
                                   f"{sorted(self.held)}); an epoch is sent once, within {self.hold_epochs} epochs")
            trajectory = self.held.pop(epoch)
        outbox.put(f"actor{actor_rank}", (self.rank, trajectory))

    def take_trajectory(self, epoch: int) -> Trajectory:
        """Epoch ``epoch``'s trajectory itself, let go here (for tools and tests that read it in the driver)."""
        with self._held_lock:
            return self.held.pop(epoch)

    @torch.no_grad()
    def eval_epoch(self, chunk_steps: int, seed: int, sample: bool = False) -> list[EpisodeStats]:
        """``chunk_steps`` greedy chunk steps over the eval envs; the episodes that ended.

        With ``sample`` the actions are sampled instead (the stochastic policy that RL trains).
        Either way the round draws from a stream of its own seeded with ``seed + rank`` (embodied.core.rng), so
        a sampled eval repeats itself, a greedy policy that still draws (a flow head's starting
        noise) gives the same numbers for the same checkpoint, and training's draws are untouched.
        """
        if self.evaluation is None:
            raise RuntimeError(f"rollout rank {self.rank} has no eval envs")
        with self._failure_sent_to_peers(self.evaluation), rng.drawing(rng.RandomStream(seed + self.rank)):
            steps, _, _ = self._run(self.evaluation, chunk_steps, deterministic=not sample)
        return [e for _, result in steps for e in result.episodes]

    def _run(self, link: Link, chunk_steps: int, deterministic: bool,
             new_weights: bool = False) -> tuple[list[tuple[PolicyOutput, ChunkStepResult]], Obs, Obs]:
        """Act and exchange ``chunk_steps`` times; each step's output and result, the first obs and the last.

        Pipeline stages are served in turn, and a stage's result is received just before acting on
        it again, so env workers step one stage while this worker infers the next. Every returned
        batch is in env order, whatever the stages.
        """
        stages = [shards for shards in link.stage_shards() if shards]
        obs = [obs_concat([_get(link, s) for s in shards]) for shards in stages]
        first = _obs_in_env_order(stages, obs)
        steps: list[tuple[PolicyOutput, ChunkStepResult]] = []
        outs: list[PolicyOutput] = []
        busy = self.busy
        for t in range(chunk_steps + 1):
            if new_weights and 0 < t < chunk_steps:
                with busy("sync"):
                    self._load_new_weights()
            results, acted = [], []
            for i, shards in enumerate(stages):
                if t > 0:
                    with busy("wait"):
                        results.append(_joined([_get(link, s) for s in shards]))
                    obs[i] = results[i].obs
                if t < chunk_steps:
                    with busy("act"):
                        acted.append(self._act(obs[i], deterministic))
                    self._check(acted[i], shards, t)
                    with busy("send"):
                        _send(link, shards, acted[i])
            if t > 0:
                steps.append(_in_env_order(stages, outs, results))
            outs = acted
        return steps, first, _obs_in_env_order(stages, obs)

    # -- internals ---------------------------------------------------------------------------

    def _load_new_weights(self) -> None:
        """Load the newest weights waiting in the inbox, if any (older ones are skipped)."""
        if self.weights_inbox is None:
            return
        newest = None
        while self.weights_inbox.qsize(self.weights_key) > 0:
            newest = self.weights_inbox.get(self.weights_key, timeout=0)
        if newest is not None:
            self.sync_weights(newest, skip_older=True)

    @contextmanager
    def _failure_sent_to_peers(self, link: Link) -> Iterator[None]:
        """On an error, tell the env ranks at once rather than leave them waiting out the timeout; also
        when an env rank failed, so that the other env ranks of this worker stop too."""
        try:
            yield
        except Exception as exc:
            link.fail(link.to_env, PeerFailure(f"rollout worker {self.rank} failed: {exc!r}"))
            raise

    def _act(self, obs: Obs, deterministic: bool) -> PolicyOutput:
        with rng.drawing(rng.active_stream() or self.stream):  # eval_epoch's stream, else the worker's own
            out = self.policy.act(obs, deterministic=deterministic)
        out.version = self.version
        return out

    def _check(self, out: PolicyOutput, shards: list[Shard], t: int) -> None:
        """Refuse NaN/inf actions, log-probs or values before any env executes them."""
        bad = non_finite_outputs({"actions": out.actions, "logprobs": out.logprobs, "values": out.values})
        if bad:
            row, env_index = bad[0][1], None
            for shard in shards:  # the batch row -> its global env index
                if row < shard.size:
                    env_index = shard.start + row
                    break
                row -= shard.size
            raise NonFinitePolicyError(
                f"rollout worker {self.rank}: the policy (weights version {self.version}) produced non-finite "
                f"{', '.join(n for n, _ in bad)} at chunk step {t}, first for env index {env_index}; its "
                f"observations were finite (the env worker checks them), so the weights or the model are at fault")

    def _final_values(self, result: ChunkStepResult) -> torch.Tensor:
        """V(final_obs) where an episode was truncated (or ended at all, with ``bootstrap_terminations``), 0
        elsewhere."""
        valued = torch.as_tensor(result.dones if self.bootstrap_terminations else result.truncated)
        if result.final_obs is None or not valued.any():
            return torch.zeros(len(valued))
        return torch.where(valued, self.policy.value(result.final_obs).float(), 0.0)

    def _trajectory(self, steps: list, next_values: torch.Tensor) -> Trajectory:
        outs = [s[0] for s in steps]
        results: list[ChunkStepResult] = [s[1] for s in steps]

        def stack(arrays: list) -> torch.Tensor:
            if isinstance(arrays[0], np.ndarray):  # one copy, writable (Ray hands over read-only arrays)
                return torch.from_numpy(np.stack(arrays))
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
            version=outs[0].version,
            versions=stack([[o.version] * len(o.actions) for o in outs]),
            episodes=[e for r in results for e in r.episodes],
            expert_actions=(stack([r.expert_actions for r in results]).float()
                            if all(r.expert_actions is not None for r in results) else None),
        )


def _observations(record: Callable[..., dict[str, Any]], first: Obs, steps: list[tuple[PolicyOutput, ChunkStepResult]],
                  last: Obs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """What replay keeps (``record``: ``AlgorithmConfig.replay_record`` with the policy) of the obs each chunk step acted on and of the obs after
    it ([T, N, ...] each): after a done, of the episode's ``final_obs`` (the auto-reset obs is what the next step
    acts on). ``last`` is the obs after the last step; only it and the final obs are recorded without an act."""
    outs, results = [out for out, _ in steps], [result for _, result in steps]
    seen = [first] + [r.obs for r in results[:-1]]
    acted = [_tensors(record(obs, out)) for obs, out in zip(seen, outs, strict=True)]
    after = acted[1:] + [_tensors(record(last))]
    for t, r in enumerate(results):
        done = np.flatnonzero(np.asarray(r.dones))
        if r.final_obs is not None and len(done):
            final = _tensors(record(obs_rows(r.final_obs, done)))
            after[t] = {k: v.clone().index_put_((torch.as_tensor(done),), final[k].to(v.dtype))
                        for k, v in after[t].items()}
    return ({k: torch.stack([o[k] for o in acted]) for k in acted[0]},
            {k: torch.stack([o[k] for o in after]) for k in after[0]})


def _tensors(record: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A replay record's entries as CPU tensors (numpy arrays copied when read-only, as Ray hands them over)."""
    out = {}
    for key, value in record.items():
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value if value.flags.writeable else value.copy())
        out[key] = torch.as_tensor(value).cpu()
    return out


def _get(link: Link, shard: Shard) -> Any:
    """The next item from ``shard``'s env rank; raises if that rank reported a failure."""
    item = link.to_rollout.get(link.key(shard), timeout=link.timeout)
    if isinstance(item, PeerFailure):
        if item.error is not None:  # an env worker's watchdog: the hung env's own error
            raise item.error
        raise PeerFailureError(item.message)
    return item


def _joined(parts: list[ChunkStepResult]) -> ChunkStepResult:
    """A stage's shard results as one batch (a single shard's as it came: concatenating copies every array)."""
    return parts[0] if len(parts) == 1 else ChunkStepResult.concat(parts)


def _send(link: Link, shards: list[Shard], out: PolicyOutput) -> None:
    """Each shard's rows of the action chunk, to its env rank."""
    actions = out.actions.detach().cpu().numpy().astype(np.float32)
    offset = 0
    for shard in shards:
        link.to_env.put(link.key(shard), actions[offset : offset + shard.size])
        offset += shard.size


def _pieces(stages: list[list[Shard]]) -> list[tuple[int, int, int]]:
    """(stage, first row, last row) of every shard, in env order."""
    rows = []
    for i, shards in enumerate(stages):
        offset = 0
        for shard in shards:
            rows.append((shard.start, i, offset, offset + shard.size))
            offset += shard.size
    return [r[1:] for r in sorted(rows)]


def _in_env_order(stages: list[list[Shard]], outs: list[PolicyOutput],
                  results: list[ChunkStepResult]) -> tuple[PolicyOutput, ChunkStepResult]:
    """One step's per-stage outputs and results joined into env order."""
    if len(stages) == 1:
        return outs[0], results[0]
    pieces = _pieces(stages)
    out = PolicyOutput(
        actions=torch.cat([outs[i].actions[a:b] for i, a, b in pieces]),
        logprobs=torch.cat([outs[i].logprobs[a:b] for i, a, b in pieces]),
        values=torch.cat([outs[i].values[a:b] for i, a, b in pieces]),
        forward_inputs={k: torch.cat([outs[i].forward_inputs[k][a:b] for i, a, b in pieces])
                        for k in outs[0].forward_inputs},
        version=outs[0].version,
    )
    return out, ChunkStepResult.concat([results[i].slice(a, b) for i, a, b in pieces])


def _obs_in_env_order(stages: list[list[Shard]], obs: list[Obs]) -> Obs:
    if len(stages) == 1:
        return obs[0]
    return obs_concat([obs_slice(obs[i], a, b) for i, a, b in _pieces(stages)])


"""``ActorWorker``: turns rollout trajectories into an update (the configured algorithm) and publishes
versioned weights.

One worker is one rank. With ``actor.num_ranks > 1`` the ranks join one process group (``join_group``,
``embodied.workers.ranks``): each gets its own share of the trajectories, takes its share of every
minibatch, and the gradients are summed, so the ranks step as one rank would on the whole batch.
``actor.grad_accumulation_steps`` splits each rank's share again into micro-batches, one backward each.

``actor.ema_decay`` keeps an exponential moving average of the trained parameters, stepped after every
optimizer step. The live weights act in rollouts and train; the average is what evals act with
(``use_average``) and what a checkpoint's policy holds, the live weights riding along as ``live_policy``
so a resumed run trains on exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from embodied.algorithms import Algorithm
from embodied.algorithms.base import Averages, expand_mask
from embodied.channels import Channel
from embodied.checkpoint import (check_policy_spec, find_checkpoint, load_checkpoint, load_policy_state,
                                 non_finite_tensors, save_policy_checkpoint)
from embodied.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.config import ActorConfig, AlgorithmConfig
from embodied.policy import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.types import Trajectory
from embodied.workers.ranks import ProcessGroup, Ranks, rendezvous_address


# The trajectories are sent when the update is asked for: they arrive within seconds; a worker that died on the
# way is reported by the driver long before this.
TRAJECTORY_TIMEOUT_S = 600.0


class ActorWorker:
    """Holds the trained policy and its optimizer; ``version`` counts updates."""

    warms_value_head: ClassVar[bool] = True  # algorithm.critic_warmup_iterations trains the policy's value head

    def __init__(self, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: AlgorithmConfig, actor: ActorConfig,
                 total_iterations: int, seed: int, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        torch.manual_seed(seed)
        self.algo, self.cfg, self.total_iterations, self.spec = algorithm, actor, total_iterations, spec
        self.policy_cfg = policy_cfg
        self.ranks: Ranks = Ranks()
        self.algorithm: Algorithm | None = self._build_algorithm()
        self.policy: Policy = build_policy(policy_cfg, spec)
        if policy_cfg.init_from:  # e.g. an SFT checkpoint; the driver checked its type and chunk already
            state = load_checkpoint(find_checkpoint(policy_cfg.init_from))
            check_policy_spec(state, spec.action_dim, "policy.init_from")
            load_policy_state(self.policy, state["actor"])
        # Once per run (the actor is the one copy that trains), after init_from: what it loaded (normalization
        # statistics, say) is what the run uses.
        print(self.policy.describe(), flush=True)
        self._build_optimizer()
        if algorithm.critic_warmup_iterations > 0 and self.warms_value_head and not self.value_head:
            raise ValueError(f"algorithm.critic_warmup_iterations={algorithm.critic_warmup_iterations}: "
                             f"policy.type={policy_cfg.type} ({type(self.policy).__name__}) names no value-head "
                             f"parameters (Policy.value_head_prefixes), so warm-up could not train the critic alone")
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0
        self._live: dict[str, torch.Tensor] | None = None  # the live weights while the policy holds the average

    def _build_algorithm(self) -> Algorithm | None:
        """The on-policy algorithm the update runs through (``algorithm.name``'s ``algorithm_class``)."""
        return self.algo.algorithm_type()(self.algo)

    def _new_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """Adam over ``params`` with the algorithm's epsilon (``lr_at`` sets the learning rate of every step)."""
        return torch.optim.Adam(params, lr=self.cfg.lr, eps=self.algo.adam_eps)  # type: ignore[attr-defined]

    def _build_optimizer(self) -> None:
        # Only what trains: a LoRA-wrapped backbone's frozen weights get no optimizer state.
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = self._new_optimizer(self.params)
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.value_head = {id(p) for p in self.policy.value_head_parameters()}
        self._reset_average()

    # -- the moving average (actor.ema_decay) ------------------------------------------------------

    def _trained(self) -> dict[str, torch.nn.Parameter]:
        return {name: p for name, p in self.policy.named_parameters() if p.requires_grad}

    def _reset_average(self) -> None:
        """The average starts at the weights the policy holds now (float32, whatever the policy's dtype)."""
        self.ema: dict[str, torch.Tensor] | None = None
        if self.cfg.ema_decay > 0:
            self.ema = {name: p.detach().float().clone() for name, p in self._trained().items()}

    @torch.no_grad()
    def _step_average(self) -> None:
        if self.ema is not None:
            for name, p in self._trained().items():
                self.ema[name].lerp_(p.detach().float(), 1.0 - self.cfg.ema_decay)

    @torch.no_grad()
    def use_average(self, on: bool) -> None:
        """Put the average into the policy (``on``), or the live weights back. Evals and checkpoints run between
        the two calls; weights published meanwhile are the average. A no-op without ``actor.ema_decay``."""
        if self.ema is None or on == (self._live is not None):
            return
        trained = self._trained()
        if on:
            self._live = {name: p.detach().clone() for name, p in trained.items()}
        source = self.ema if on else self._live
        assert source is not None
        for name, p in trained.items():
            p.copy_(source[name])
        if not on:
            self._live = None

    @contextmanager
    def _averaged(self) -> Iterator[dict[str, torch.Tensor]]:
        """The policy holds the average inside; yields the live trained weights ({} without an average)."""
        was_on = self._live is not None
        self.use_average(True)
        try:
            yield dict(self._live or {})  # already a copy, and use_average(False) only lets go of it
        finally:
            self.use_average(was_on)

    def _load_policy(self, policy: Policy, state: dict[str, Any]) -> None:
        """A checkpoint's policy into ``policy``: its saved weights (the average, if its run kept one), then the live
        weights its run trained on (``live_policy``), if any."""
        load_policy_state(policy, state)
        if self.cfg.ema_decay > 0 and policy is self.policy:
            self._reset_average()
        if state.get("live_policy"):
            _, unexpected = policy.load_state_dict(state["live_policy"], strict=False)
            if unexpected:
                raise ValueError(f"the checkpoint's live_policy names parameters this policy lacks: {unexpected[:5]}")

    # -- ranks -----------------------------------------------------------------------------------

    def rendezvous(self) -> str:
        """``host:port`` where the process group meets (asked of rank 0, on its node)."""
        return rendezvous_address()

    def join_group(self, rank: int, size: int, address: str) -> None:
        """Become rank ``rank`` of ``size``: join the process group at ``address``, make the ranks' policies one
        (rank 0's weights broadcast, or the policy sharded) and build the optimizer over what this rank holds."""
        self.ranks = ProcessGroup(rank, size, address, self.cfg.dist_backend, self.cfg.strategy)
        self.ranks.prepare(self.policy)
        self._build_optimizer()

    def weights(self, shared: bool = False) -> tuple[int, dict[str, torch.Tensor] | None]:
        """``(version, trainable state)`` for rollout workers; ``shared`` sends no tensors (colocated).

        Only trainable parameters and buffers travel (``Policy.trainable_state``): frozen weights
        are the same on every copy, so a LoRA policy sends its adapters, not its backbone.
        """
        if shared:
            return self.version, None
        state = self.ranks.full(self.policy.trainable_state())  # a collective under fsdp: every rank is asked
        if not self.ranks.is_main:
            return self.version, None  # rank 0 answers for the group
        return self.version, {k: v.detach().cpu().clone() for k, v in state.items()}

    def update_from(self, inbox: Channel, sources: int, iteration: int) -> dict[str, float]:
        """``update`` on the trajectories of the ``sources`` rollout ranks that send to this rank (key
        ``actor<rank>`` of ``inbox``), concatenated in rollout-rank order whatever order they arrive in."""
        items = [inbox.get(f"actor{self.ranks.rank}", timeout=TRAJECTORY_TIMEOUT_S) for _ in range(sources)]
        return self.update([trajectory for _, trajectory in sorted(items, key=lambda item: item[0])], iteration)

    def lr_at(self, iteration: int, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based) of ``iteration`` (1-based): linear decay to 0
        over the run (``algorithm.anneal_lr``) times a linear rise over the first ``algorithm.lr_warmup_iterations``
        policy iterations. A function of the position alone, so a resumed run takes the same steps."""
        lr = self.cfg.lr
        if self.algo.anneal_lr:
            lr *= 1.0 - (iteration - 1) / max(self.total_iterations, 1)
        warm = self.algo.lr_warmup_iterations
        policy_iteration = iteration - self.algo.critic_warmup_iterations  # the value head alone trains before
        if warm and policy_iteration > 0:
            steps = self.algo.update_epochs * self.algo.num_minibatches
            lr *= min(1.0, (policy_iteration - 1 + (step + 1) / steps) / warm)
        return lr

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """One update (``algorithm.update_epochs`` passes of minibatches); returns train metrics."""
        a = self.algo
        if self._live is not None:
            raise RuntimeError("update while the policy holds the weight average (use_average(False) first)")
        batch, batch_metrics = self.algorithm.prepare(trajectories)
        batch_metrics = self._batch_metrics(batch_metrics)
        staleness = (self.version - batch["versions"]).float()  # per chunk step, in updates (async: <= max_staleness)
        if self.ranks.sum(staleness.max().reshape(1)) > 0:  # decoupled PPO: clip around the weights the update starts from
            fresh = _expand(staleness == 0, batch["logprobs"])  # acted with these weights: keep their log-probs
            proximal = torch.where(fresh, batch["logprobs"], self._proximal_logprobs(batch))
            batch["behaviour_logprobs"], batch["logprobs"] = batch["logprobs"], proximal
        size = batch["values"].shape[0]
        warmup = iteration <= a.critic_warmup_iterations
        stats: dict[str, list[float]] = {}
        skipped = 0
        for epoch in range(a.update_epochs):
            perm = torch.randperm(size, generator=self.generator)
            for k, mb in enumerate(perm.chunk(a.num_minibatches)):  # several ranks: equal parts (config check)
                self.optimizer.param_groups[0]["lr"] = self.lr_at(iteration, epoch * a.num_minibatches + k)
                step = self._step(_take(batch, mb), warmup, f"iteration {iteration}, epoch {epoch}, minibatch {k}")
                if step is None:
                    skipped += 1
                    continue
                for key, value in step.items():
                    stats.setdefault(key, []).append(value)
            if a.target_kl is not None and stats and np.mean(stats["approx_kl"][-a.num_minibatches:]) > a.target_kl:
                break
        bad = non_finite_tensors({n: _local(p) for n, p in self.policy.named_parameters()})
        if self.ranks.sum(torch.tensor([float(bool(bad))])) > 0:  # finite gradients can still overflow a weight
            bad = bad or ["on another actor rank"]  # never publish or checkpoint it, and every rank stops
            raise NonFiniteUpdateError(f"update at iteration {iteration} left non-finite weights ({', '.join(bad)})")
        self._observe(batch["forward_inputs"])
        self.version += 1
        metrics = {f"train/{k}": float(np.mean(v)) for k, v in stats.items()} | batch_metrics
        metrics["train/lr"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/critic_warmup"] = float(warmup)
        metrics["train/skipped_minibatches"] = float(skipped)
        staleness = self.ranks.gather(staleness)  # the whole batch's, on every rank
        metrics["train/staleness_mean"], metrics["train/staleness_max"] = float(staleness.mean()), float(staleness.max())
        if self.algorithm.uses_values:
            metrics["train/explained_variance"] = _explained_variance(self.ranks.gather(batch["values"]),
                                                                      self.ranks.gather(batch["returns"]))
        return metrics

    @torch.no_grad()
    def _proximal_logprobs(self, batch: dict[str, Any]) -> torch.Tensor:
        """The current weights' log-probs of the batch's actions (before any step of this update)."""
        index = torch.arange(batch["values"].shape[0]).chunk(self.algo.num_minibatches)
        parts = []
        for rows in index:
            mb = _to(_take(batch, rows), self.device)
            parts.append(self.policy.evaluate(mb["forward_inputs"], mb["actions"])[0].float().cpu())
        return torch.cat(parts).to(batch["logprobs"].dtype)

    def _batch_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """``prepare``'s metrics of the whole batch: counts summed over the ranks, the rest averaged (each rank
        holds an equal share of the batch)."""
        if self.ranks.size == 1:
            return metrics
        summed = getattr(self.algorithm, "summed_metrics", frozenset())
        total = self.ranks.sum_stats(metrics)
        return {k: v if k in summed else v / self.ranks.size for k, v in total.items()}

    def _observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """Input statistics from the whole batch: with several ranks, the inputs ``Policy.observes`` names are
        gathered from all of them first, so every rank's statistics stay the same."""
        if self.ranks.size == 1:
            self.policy.observe(forward_inputs)
            return
        self.policy.observe({k: self.ranks.gather(forward_inputs[k]) for k in self.policy.observes})

    def _step(self, mb: dict[str, Any], warmup: bool, where: str) -> dict[str, float] | None:
        """One gradient step on this rank's share of a minibatch, in ``actor.grad_accumulation_steps``
        micro-batches; None if it was skipped for a non-finite loss or gradient (on every rank alike)."""
        rows = torch.arange(mb["values"].shape[0])
        parts = [_take(mb, r) for r in rows.chunk(self.cfg.grad_accumulation_steps)] if \
            self.cfg.grad_accumulation_steps > 1 else [mb]
        # Split in parts (micro-batches, ranks), every mean is the part's share of the whole minibatch's.
        averages = None if len(parts) == 1 and self.ranks.size == 1 else \
            Averages(mb["executed"], mb["advantages"], self.ranks.sum)
        self.optimizer.zero_grad()
        stats: dict[str, float] = {}
        for part in parts:
            part = _to(part, self.device)
            logprobs, entropy, values = self.policy.evaluate(part["forward_inputs"], part["actions"])
            out = self.algorithm.loss(logprobs, entropy, values, part, expand_mask(part["executed"], logprobs),
                                      warmup, averages)
            part_stats = self.ranks.sum_stats({k: float(v.detach()) for k, v in out.stats.items()}
                                              | {"loss": float(out.loss.detach())})
            stats = {k: stats.get(k, 0.0) + v for k, v in part_stats.items()}
            if non_finite_terms(stats):
                break  # every rank sees the same sums: all stop here
            self.ranks.backward(out.loss)
        if not non_finite_terms(stats):
            if warmup:  # the value loss also reaches shared layers (a VLA backbone, a CNN encoder): keep them still
                for p in self.params:
                    if id(p) not in self.value_head:
                        p.grad = None
            self.ranks.reduce_gradients(self.params)
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, self.algo.max_grad_norm))
        bad = non_finite_terms(stats)
        if bad:
            self.optimizer.zero_grad()  # nothing of this minibatch reaches the weights
            if self.algo.skip_nonfinite_updates:
                return None
            values_text = ", ".join(f"{name}={stats[name]}" for name in bad)
            raise NonFiniteUpdateError(
                f"update at {where}: non-finite {values_text}; the minibatch was not applied and these weights are "
                f"neither published nor checkpointed (algorithm.skip_nonfinite_updates=true skips such minibatches "
                f"and counts them in train/skipped_minibatches)")
        self.optimizer.step()
        self._step_average()
        return stats

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint needs to resume the actor (rank 0's answer; every rank is asked under fsdp).

        A policy that exports itself (``exports_pretrained``) is saved as a folder by
        ``save_checkpoint``; its trainable state is here only for comparisons in memory.
        """
        with self._averaged() as live:
            policy, optimizer = self._whole()
            if policy is None:
                return {}  # fsdp: rank 0 answers for the group
            weights = policy.trainable_state() if policy.exports_pretrained else policy.state_dict()
            if live:  # state dicts share the parameters' storage, which the live weights overwrite on the way out
                weights = {name: t.clone() for name, t in weights.items()}
        return {"policy": weights, "optimizer": optimizer.state_dict(), "version": self.version,
                "generator": self.generator.get_state(), **({"live_policy": live} if live else {})}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """Write a checkpoint folder (``embodied.checkpoint``) from rank 0, in the one-process format whatever the
        number of ranks (so it resumes into any number, and transformers opens an exported policy alone)."""
        with self._averaged() as live:  # policy/ holds the average: what evals measured and init_from reads
            policy, optimizer = self._whole()
            if policy is not None and self.ranks.is_main:
                actor_extra = {"generator": self.generator.get_state(), **({"live_policy": live} if live else {})}
                save_policy_checkpoint(Path(path), policy, optimizer, self.version, self.spec, extra, actor_extra)
        return path

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume from ``state()`` (or a checkpoint's ``actor``), saved with any number of ranks."""
        if self.ranks.strategy == "fsdp" and self.ranks.size > 1:
            self._load_sharded(state)
        else:
            self._load_policy(self.policy, state)
            self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        if "generator" in state:  # the minibatch order goes on where it stopped
            self.generator.set_state(state["generator"])

    # -- fsdp: the sharded policy as one module ----------------------------------------------------

    def _whole(self) -> tuple[Policy, torch.optim.Optimizer] | tuple[None, None]:
        """The policy and optimizer whole: themselves, or under fsdp an unsharded twin built on rank 0 from the
        gathered shards (every rank takes part in the gather; the other ranks get None)."""
        if self.ranks.strategy != "fsdp" or self.ranks.size == 1:
            return self.policy, self.optimizer
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict, set_optimizer_state_dict)

        # Only what trains is gathered: frozen weights (a LoRA backbone's) are the config's, which the twin has.
        whole = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        weights = get_model_state_dict(self.policy, options=whole)
        optim = get_optimizer_state_dict(self.policy, self.optimizer, options=whole)
        if not self.ranks.is_main:
            return None, None
        twin, twin_optimizer = self._twin()
        missing, unexpected = twin.load_state_dict(weights, strict=False)
        frozen = {name for name, p in twin.named_parameters() if not p.requires_grad}
        if unexpected or set(missing) - frozen:
            raise RuntimeError(f"fsdp: the gathered state does not fit the policy (missing "
                               f"{sorted(set(missing) - frozen)[:5]}, unexpected {unexpected[:5]})")
        set_optimizer_state_dict(twin, twin_optimizer, optim, options=StateDictOptions(full_state_dict=True))
        return twin, twin_optimizer

    def _twin(self) -> tuple[Policy, torch.optim.Optimizer]:
        """An unsharded CPU policy of the same config and its optimizer (same parameter order as the actor's)."""
        twin = build_policy(self.policy_cfg, self.spec)
        params = [p for p in twin.parameters() if p.requires_grad]
        return twin, self._new_optimizer(params)

    def _load_sharded(self, state: dict[str, Any]) -> None:
        """A one-process checkpoint into the sharded policy: loaded whole into a twin, then scattered."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                             set_model_state_dict, set_optimizer_state_dict)

        twin, twin_optimizer = self._twin()
        self._load_policy(twin, state)
        twin_optimizer.load_state_dict(state["optimizer"])
        whole = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.policy, twin.state_dict(), options=whole)
        set_optimizer_state_dict(self.policy, self.optimizer, get_optimizer_state_dict(twin, twin_optimizer),
                                 options=whole)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded (DTensor) parameter, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _to(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of a minibatch on the policy's device (a no-op on the CPU)."""
    if device.type == "cpu":
        return batch
    return {k: {n: t.to(device) for n, t in v.items()} if isinstance(v, dict) else v.to(device)
            for k, v in batch.items()}


def _take(batch: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """Rows ``index`` of every tensor of a flattened batch (forward_inputs included)."""
    return {k: {n: t[index] for n, t in v.items()} if isinstance(v, dict) else v[index] for k, v in batch.items()}


def _expand(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A [B] tensor broadcast over the trailing dims of ``like``."""
    return rows.reshape(rows.shape + (1,) * (like.dim() - 1)).expand_as(like)


def _explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - values).var() / var)

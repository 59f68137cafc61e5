"""``ActorWorker``: turns rollout trajectories into an update (the configured algorithm) and publishes
versioned weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.algorithms import Algorithm
from embodied.checkpoint import (check_policy_spec, find_checkpoint, load_checkpoint, load_policy_state,
                                 non_finite_tensors, save_policy_checkpoint)
from embodied.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.config import ActorConfig, AlgorithmConfig
from embodied.policy import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.registry import ALGORITHMS
from embodied.types import Trajectory


class ActorWorker:
    """Holds the trained policy and its optimizer; ``version`` counts updates."""

    def __init__(self, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: AlgorithmConfig, actor: ActorConfig,
                 total_iterations: int, seed: int, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        torch.manual_seed(seed)
        self.algo, self.cfg, self.total_iterations, self.spec = algorithm, actor, total_iterations, spec
        self.algorithm: Algorithm = ALGORITHMS.resolve(algorithm.name)(algorithm)
        self.policy: Policy = build_policy(policy_cfg, spec)
        print(self.policy.describe(), flush=True)  # once per run: the actor is the one copy that trains
        if policy_cfg.init_from:  # e.g. an SFT checkpoint; the driver checked its type and chunk already
            state = load_checkpoint(find_checkpoint(policy_cfg.init_from))
            check_policy_spec(state, spec.action_dim, "policy.init_from")
            load_policy_state(self.policy, state["actor"])
        # Only what trains: a LoRA-wrapped backbone's frozen weights get no optimizer state.
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=actor.lr, eps=actor.adam_eps)
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.value_head = {id(p) for p in self.policy.value_head_parameters()}
        if algorithm.critic_warmup_iterations > 0 and not self.value_head:
            raise ValueError(f"algorithm.critic_warmup_iterations={algorithm.critic_warmup_iterations}: "
                             f"policy.type={policy_cfg.type} ({type(self.policy).__name__}) names no value-head "
                             f"parameters (Policy.value_head_prefixes), so warm-up could not train the critic alone")
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0

    def weights(self, shared: bool = False) -> tuple[int, dict[str, torch.Tensor] | None]:
        """``(version, trainable state)`` for rollout workers; ``shared`` sends no tensors (colocated).

        Only trainable parameters and buffers travel (``Policy.trainable_state``): frozen weights
        are the same on every copy, so a LoRA policy sends its adapters, not its backbone.
        """
        if shared:
            return self.version, None
        return self.version, {k: v.detach().cpu().clone() for k, v in self.policy.trainable_state().items()}

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """One update (``algorithm.update_epochs`` passes of minibatches); returns train metrics."""
        a = self.algo
        batch, batch_metrics = self.algorithm.prepare(trajectories)
        staleness = (self.version - batch["versions"]).float()  # per chunk step, in updates (async: <= max_staleness)
        if staleness.max() > 0:  # decoupled PPO: clip around the weights the update starts from
            fresh = _expand(staleness == 0, batch["logprobs"])  # acted with these weights: keep their log-probs
            proximal = torch.where(fresh, batch["logprobs"], self._proximal_logprobs(batch))
            batch["behaviour_logprobs"], batch["logprobs"] = batch["logprobs"], proximal
        size = batch["values"].shape[0]
        if self.cfg.anneal_lr:
            frac = 1.0 - (iteration - 1) / max(self.total_iterations, 1)
            self.optimizer.param_groups[0]["lr"] = frac * self.cfg.lr
        warmup = iteration <= a.critic_warmup_iterations
        stats: dict[str, list[float]] = {}
        skipped = 0
        for epoch in range(a.update_epochs):
            perm = torch.randperm(size, generator=self.generator)
            for k, mb in enumerate(perm.chunk(a.num_minibatches)):
                step = self._step(_take(batch, mb), warmup, f"iteration {iteration}, epoch {epoch}, minibatch {k}")
                if step is None:
                    skipped += 1
                    continue
                for key, value in step.items():
                    stats.setdefault(key, []).append(value)
            if a.target_kl is not None and stats and np.mean(stats["approx_kl"][-a.num_minibatches:]) > a.target_kl:
                break
        bad = non_finite_tensors(dict(self.policy.named_parameters()))
        if bad:  # finite gradients can still overflow a weight; never publish or checkpoint it
            raise NonFiniteUpdateError(f"update at iteration {iteration} left non-finite weights ({', '.join(bad)})")
        self.policy.observe(batch["forward_inputs"])
        self.version += 1
        metrics = {f"train/{k}": float(np.mean(v)) for k, v in stats.items()} | batch_metrics
        metrics["train/lr"] = self.optimizer.param_groups[0]["lr"]
        metrics["train/critic_warmup"] = float(warmup)
        metrics["train/skipped_minibatches"] = float(skipped)
        metrics["train/staleness_mean"], metrics["train/staleness_max"] = float(staleness.mean()), float(staleness.max())
        if self.algorithm.uses_values:
            metrics["train/explained_variance"] = _explained_variance(batch["values"], batch["returns"])
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

    def _step(self, mb: dict[str, Any], warmup: bool, where: str) -> dict[str, float] | None:
        """One gradient step; None if it was skipped for a non-finite loss or gradient."""
        mb = _to(mb, self.device)
        logprobs, entropy, values = self.policy.evaluate(mb["forward_inputs"], mb["actions"])
        out = self.algorithm.loss(logprobs, entropy, values, mb, _mask(mb["executed"], logprobs), warmup)
        stats = {k: float(v.detach()) for k, v in out.stats.items()} | {"loss": float(out.loss.detach())}
        self.optimizer.zero_grad()
        if not non_finite_terms(stats):
            out.loss.backward()
            if warmup:  # the value loss also reaches shared layers (a VLA backbone, a CNN encoder): keep them still
                for p in self.params:
                    if id(p) not in self.value_head:
                        p.grad = None
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
        return stats

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint needs to resume the actor.

        A policy that exports itself (``exports_pretrained``) is saved as a folder by
        ``save_checkpoint``; its trainable state is here only for comparisons in memory.
        """
        policy = self.policy.trainable_state() if self.policy.exports_pretrained else self.policy.state_dict()
        return {"policy": policy, "optimizer": self.optimizer.state_dict(), "version": self.version,
                "generator": self.generator.get_state()}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """Write a checkpoint folder (``embodied.checkpoint``) from here, where the policy lives."""
        save_policy_checkpoint(Path(path), self.policy, self.optimizer, self.version, self.spec, extra,
                               {"generator": self.generator.get_state()})
        return path

    def load_state(self, state: dict[str, Any]) -> None:
        load_policy_state(self.policy, state)
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        if "generator" in state:  # the minibatch order goes on where it stopped
            self.generator.set_state(state["generator"])


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


def _mask(executed: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """The executed mask [B, C] at the granularity of the log-probs."""
    if logprobs.dim() == 1:
        return executed.any(-1)  # chunk: a chunk counts if any of its sub-steps ran
    if logprobs.dim() == 2:
        return executed
    return executed.unsqueeze(-1).expand_as(logprobs)


def _explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - values).var() / var)

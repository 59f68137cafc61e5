"""The interface every policy implements, and how a config turns into one.

A policy lives in its own folder under ``policies/`` with a configuration dataclass (a subclass
of ``PolicyConfig``) registered by name in the ``embodied.policies`` entry-point group. The config
names its model class as a lazy ``"module:attr"`` string, so loading a config imports no model.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from embodied.core.registry import load_entry_point
from embodied.core.types import LogprobGranularity, Obs, PolicyOutput
from embodied.policy.config import PolicyConfig, PolicySpec  # re-exported: policies and workers import them from here


class Policy(nn.Module, abc.ABC):
    """A torch module that acts on batched observations and replays its forward pass."""

    logprob_granularity: ClassVar[LogprobGranularity] = "chunk"
    # The forward_inputs keys ``observe`` reads: with several actor ranks only these are gathered from every
    # rank before ``observe`` (a policy that overrides it names them; the rest never travel).
    observes: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        """Sample (or, if deterministic, pick the mode of) an action chunk for every env."""

    @abc.abstractmethod
    def evaluate(
        self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logprobs, entropy, values) of ``actions`` [B, C, A] given what ``act`` saw."""

    @abc.abstractmethod
    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """What ``act`` would put in ``PolicyOutput.forward_inputs`` for ``obs`` (CPU tensors), without acting.

        Supervised learning (``embodied sft``) scores demonstrated actions with
        ``evaluate(forward_inputs(obs), actions)``.
        """

    @abc.abstractmethod
    def value(self, obs: Obs) -> torch.Tensor:
        """V(obs), float32 [B]; used to bootstrap truncated episodes."""

    def supervised_loss(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor,
                        executed: torch.Tensor) -> torch.Tensor:
        """The loss ``embodied sft`` minimizes on demonstrated chunks ``actions`` [B, C, A], with
        ``executed`` [B, C] False past an episode's end.

        By default the negative log-likelihood under ``evaluate``, averaged over executed sub-steps:
        per chunk [B] (weighted by its executed sub-steps), per action [B, C] or per token [B, C, A]
        (masked by ``executed``). A policy without a tractable likelihood (a flow-matching head)
        overrides it with its own objective.
        """
        logprobs, _, _ = self.evaluate(forward_inputs, actions)
        return masked_nll(logprobs, executed)

    def fit_statistics(self, batches: Iterable[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]) -> None:
        """Fit input and output statistics to demonstrations before supervised learning starts.

        ``batches`` yields ``(forward_inputs, actions [B, C, A], executed [B, C])``. By default each
        batch's inputs go to ``observe`` (the MLP's running state normalization); π0 computes the
        state and action mean and std its model normalizes with, when its checkpoint has none.
        """
        for forward_inputs, _, _ in batches:
            self.observe(forward_inputs)

    def after_init_from(self) -> None:
        """Called once after ``policy.init_from``'s weights are loaded into a new policy (for training, SFT or a
        frozen base), before any step; not on resume, whose state is loaded over it. Where a policy resets what it
        should not inherit from the checkpoint (the Gaussian policies' ``policy.init_from_log_std``); the default
        keeps everything loaded."""

    def describe(self) -> str:
        """One line printed when training starts: what the policy is and its parameter counts."""
        total = sum(p.numel() for p in self.parameters())
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return f"policy: {type(self).__name__}, {total / 1e6:.3f}M parameters, {trainable / 1e6:.3f}M trainable"

    def fsdp_units(self) -> list[nn.Module]:
        """Submodules that ``actor.strategy=fsdp`` shards each on its own (a backbone's layers: one layer's
        weights gathered at a time); [] shards the policy as one unit."""
        return []

    exports_pretrained: ClassVar[bool] = False  # checkpoints hold save_pretrained() output, not a state dict

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Trainable parameters and all buffers: what changes in training, so what weight sync sends.

        Frozen parameters (a LoRA-wrapped backbone, say) come from the policy's config on every
        copy, so they never travel. For a fully trained policy this is its whole ``state_dict``.
        """
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        buffers = {name for name, _ in self.named_buffers()}
        return {k: v for k, v in self.state_dict().items() if k in trainable or k in buffers}

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the policy as a folder of its own format (policies with ``exports_pretrained``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps its weights in the trainer state dict")

    def load_pretrained(self, directory: str | Path) -> None:
        """Read what ``save_pretrained`` wrote (policies with ``exports_pretrained``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps its weights in the trainer state dict")

    def observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """Update input statistics from a rollout batch [N, ...]; the actor calls it after each update.

        Called only after the PPO epochs, so ``evaluate`` during an update sees exactly the
        statistics ``act`` used during the rollout; the new ones reach rollout workers with the
        next weight sync (they live in buffers, so in the state dict).
        """


def build_policy(config: PolicyConfig, spec: PolicySpec) -> Policy:
    """Instantiate the model class the config names."""
    cls = load_entry_point(type(config).model_class)
    return cls(config, spec)


def masked_nll(logprobs: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of demonstrated chunks, averaged over their executed sub-steps.

    ``logprobs`` per chunk [B] (each weighted by its share of executed sub-steps), per action [B, C] or
    per token [B, C, A]; ``executed`` [B, C] is False past an episode's end.
    """
    executed = executed.to(logprobs.device)
    if logprobs.dim() == 1:
        weight = executed.float().sum(-1) / executed.shape[-1]
        return -(logprobs * weight).sum() / weight.sum().clamp_min(1e-8)
    mask = executed if logprobs.dim() == 2 else executed.unsqueeze(-1).expand_as(logprobs)
    mask = mask.float()
    return -(logprobs * mask).sum() / mask.sum().clamp_min(1e-8)

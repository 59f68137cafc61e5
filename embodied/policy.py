"""The interface every policy implements, and how a config turns into one.

A policy lives in its own folder under ``policies/`` with a configuration dataclass (a subclass
of ``PolicyConfig``) registered by name in the ``embodied.policies`` entry-point group. The config
names its model class as a lazy ``"module:attr"`` string, so loading a config imports no model.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from embodied.registry import POLICIES, load_entry_point
from embodied.types import LogprobGranularity, Obs, PolicyOutput


@dataclass(frozen=True)
class PolicySpec:
    """What the env tells a policy at build time."""

    state_dim: int  # S, 0 when the obs mode has no states
    image_shape: tuple[int, ...] | None  # (H, W, 3) of main images, None without images
    action_dim: int  # A
    action_low: tuple[float, ...]  # per-dimension bounds of the env's action space
    action_high: tuple[float, ...]


@dataclass
class PolicyConfig:
    """Fields every policy has. Subclasses add their own, each with a default and a doc line."""

    type: str = "mlp"  # registered policy name (see `embodied list policies`)
    action_chunk: int = 1  # C: actions emitted per inference, executed open-loop by the env

    model_class: ClassVar[str] = ""  # "module:attr" of the Policy subclass built from this config


class Policy(nn.Module, abc.ABC):
    """A torch module that acts on batched observations and replays its forward pass."""

    logprob_granularity: ClassVar[LogprobGranularity] = "chunk"

    @abc.abstractmethod
    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        """Sample (or, if deterministic, pick the mode of) an action chunk for every env."""

    @abc.abstractmethod
    def evaluate(
        self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logprobs, entropy, values) of ``actions`` [B, C, A] given what ``act`` saw."""

    @abc.abstractmethod
    def value(self, obs: Obs) -> torch.Tensor:
        """V(obs), float32 [B]; used to bootstrap truncated episodes."""

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


def policy_config_class(name: str) -> type[PolicyConfig]:
    """The registered configuration dataclass for ``policy.type: name``."""
    cls = POLICIES.resolve(name)
    if not (isinstance(cls, type) and issubclass(cls, PolicyConfig)):
        raise TypeError(f"policy {name!r} resolves to {cls!r}, which is not a PolicyConfig subclass")
    return cls

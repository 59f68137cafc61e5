"""A policy of uniform random actions: the benchmarks time the engine, not a model.

    register_random_policy()          # policy.type=random in any config
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from embodied.core.types import TASK_DESCRIPTIONS, Obs, PolicyOutput
from embodied.policy.base import Policy, PolicyConfig, PolicySpec


@dataclass
class RandomConfig(PolicyConfig):
    """A policy that samples uniform actions: measures the engine, not a model."""

    type: str = "random"  # registered at run time by ``register_random_policy``
    seed: int = 0  # seed of the action sampler

    model_class: ClassVar[str] = "embodied.bench.random_policy:RandomPolicy"


class RandomPolicy(Policy):
    """Uniform actions within the env's bounds; log-probs are the uniform density, values 0."""

    def __init__(self, config: RandomConfig, spec: PolicySpec) -> None:
        super().__init__()
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        self.register_buffer("low", torch.tensor(spec.action_low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(spec.action_high, dtype=torch.float32))
        self.unused = nn.Parameter(torch.zeros(1))  # the actor's optimizer needs a parameter
        self.generator = torch.Generator().manual_seed(config.seed)
        # The log-density of a whole chunk, once: act() runs every chunk step and should cost next to nothing.
        self.chunk_logprob = -float(torch.log(self.high - self.low).sum()) * self.chunk

    def _logprob(self, batch: int) -> torch.Tensor:
        return torch.full((batch,), self.chunk_logprob) + 0 * self.unused

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        batch = len(obs[TASK_DESCRIPTIONS])
        shape = (batch, self.chunk, self.action_dim)
        if deterministic:
            actions = ((self.low + self.high) / 2).expand(shape).clone()
        else:
            actions = self.low + (self.high - self.low) * torch.rand(shape, generator=self.generator)
        return PolicyOutput(actions, torch.full((batch,), self.chunk_logprob), torch.zeros(batch), {})

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {}

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        batch = actions.shape[0]
        return self._logprob(batch), torch.zeros(batch) + 0 * self.unused, torch.zeros(batch) + 0 * self.unused

    def value(self, obs: Obs) -> torch.Tensor:
        return torch.zeros(len(obs[TASK_DESCRIPTIONS]))


def register_random_policy() -> None:
    """Make ``policy.type=random`` known (the registry takes the config class object itself)."""
    from embodied.core.registry import POLICIES

    POLICIES.register("random", RandomConfig, overwrite=True)

"""The linear Gaussian policy (``LinearConfig``): a ``Policy`` (``embodied.policy.base``) in a few lines."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from embodied.api import Obs, Policy, PolicyOutput, PolicySpec
from my_policy.configuration import LinearConfig


class LinearPolicy(Policy):
    """One Gaussian over the whole chunk [C * A]; its log-prob is the sum over the chunk's entries."""

    logprob_granularity = "chunk"  # act's and evaluate's log-probs are [B]

    def __init__(self, config: LinearConfig, spec: PolicySpec) -> None:
        super().__init__()
        index = config.state_indices if config.state_indices is not None else range(spec.state_dim)
        self.index = list(index)
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        self.mean = nn.Linear(len(self.index), self.chunk * self.action_dim)
        nn.init.zeros_(self.mean.weight)  # the first actions are noise around 0
        self.critic = nn.Linear(len(self.index), 1)
        self.log_std = nn.Parameter(torch.full((self.chunk * self.action_dim,), config.init_log_std))

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """What act reads, kept in the trajectory so evaluate can replay it."""
        return {"states": torch.as_tensor(np.asarray(obs["states"]), dtype=torch.float32)[:, self.index]}

    def _dist(self, x: torch.Tensor) -> Normal:
        return Normal(self.mean(x), self.log_std.exp().expand(x.shape[0], -1))

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        inputs = self.forward_inputs(obs)
        dist = self._dist(inputs["states"])
        flat = dist.mean if deterministic else dist.sample()
        return PolicyOutput(actions=flat.view(-1, self.chunk, self.action_dim), logprobs=dist.log_prob(flat).sum(-1),
                            values=self.critic(inputs["states"]).squeeze(-1), forward_inputs=inputs)

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        x = forward_inputs["states"]
        dist = self._dist(x)
        flat = actions.reshape(actions.shape[0], -1)
        return dist.log_prob(flat).sum(-1), dist.entropy().sum(-1), self.critic(x).squeeze(-1)

    def value(self, obs: Obs) -> torch.Tensor:
        return self.critic(self.forward_inputs(obs)["states"]).squeeze(-1)

"""Gaussian MLP actor-critic that emits an action chunk from the state observation.

The actor maps states [B, S] (with ``instruction_features``, and the instruction's hashed words) to the mean
of a diagonal Gaussian over the whole chunk [B, C * A]
(one state-independent log-std per chunk entry); the log-prob of a chunk is the sum over its
C * A dimensions (``logprob_granularity = "chunk"``). A separate critic gives V(s). With ``ensemble_size`` K > 1 the
mean is the average of K independently initialized actors, each fitted to demonstrations on its own likelihood.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from embodied.core import rng
from embodied.core.types import STATES, Obs, PolicyOutput
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policy.base import Policy, PolicySpec, masked_nll
from embodied.policy.ensemble import EnsembleLinear
from embodied.policy.encoder import (INSTRUCTION, StatesEncoder, instruction_features, merge_statistics,  # noqa: F401
                                     standardize, states_tensor)


def _mlp(sizes: list[int], activation: type[nn.Module], out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        linear = nn.Linear(n_in, n_out)
        # Orthogonal init as in CleanRL; a small gain on the last layer keeps early actions near 0.
        nn.init.orthogonal_(linear.weight, out_gain if last else np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
    return nn.Sequential(*layers)


class EnsembleMLP(nn.Module):
    """K MLPs of the same sizes, one ``EnsembleLinear`` a layer: inputs [B, in] -> outputs [K, B, out].

    Each member is initialized as ``_mlp`` initializes one (orthogonal, zero biases), from its own draws.
    """

    def __init__(self, members: int, sizes: list[int], activation: type[nn.Module], out_gain: float) -> None:
        super().__init__()
        self.members, self.activation = members, activation()
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        for i, layer in enumerate(self.layers):
            gain = out_gain if i == len(self.layers) - 1 else np.sqrt(2)
            with torch.no_grad():
                for k in range(members):  # [in, out]: orthogonal as nn.Linear's [out, in] weight would be
                    nn.init.orthogonal_(layer.weight[k].T, gain)
                layer.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.unsqueeze(0).expand(self.members, -1, -1)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h


class MLPPolicy(Policy):
    """Gaussian MLP policy over action chunks, with a value head."""

    logprob_granularity = "chunk"
    observes = (STATES,)  # the running state statistics (observe)

    def __init__(self, config: MLPConfig, spec: PolicySpec) -> None:
        super().__init__()
        if spec.state_dim <= 0:
            raise ValueError("policy.type=mlp needs state observations (env.obs_mode 'state' or 'state+rgb')")
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        act = {"tanh": nn.Tanh, "relu": nn.ReLU}[config.activation]
        out = self.chunk * self.action_dim
        self.instruction_buckets = config.instruction_features
        inputs = spec.state_dim + self.instruction_buckets
        self.ensemble_size = config.ensemble_size
        sizes = [inputs, *config.hidden_sizes, out]
        # One actor keeps nn.Sequential's parameter names, so checkpoints of before the ensemble load as they were.
        self.actor_mean = _mlp(sizes, act, 0.01) if self.ensemble_size == 1 else EnsembleMLP(
            self.ensemble_size, sizes, act, 0.01)
        self.critic = _mlp([inputs, *config.hidden_sizes, 1], act, 1.0)
        self.log_std = nn.Parameter(torch.full((out,), float(config.init_log_std)))
        self.init_from_log_std = config.init_from_log_std
        self.normalize_states = config.normalize_states
        self.freeze_state_statistics = config.freeze_state_statistics
        self.register_buffer("state_mean", torch.zeros(spec.state_dim))
        self.register_buffer("state_var", torch.ones(spec.state_dim))
        self.register_buffer("state_count", torch.tensor(1e-4))

    def after_init_from(self) -> None:
        """Set the loaded Gaussian's log std to policy.init_from_log_std, where given."""
        if self.init_from_log_std is not None:
            with torch.no_grad():
                self.log_std.fill_(self.init_from_log_std)

    def _normalized(self, states: torch.Tensor) -> torch.Tensor:
        if not self.normalize_states:
            return states
        return standardize(states, self.state_mean, self.state_var)

    def _features(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """What actor and critic read: the (standardized) states, then the instruction's buckets where configured."""
        states = self._normalized(inputs[STATES])
        return torch.cat([states, inputs[INSTRUCTION]], -1) if self.instruction_buckets else states

    @torch.no_grad()
    def observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """Merge the batch's state mean and variance into the running ones (parallel algorithm)."""
        if not self.normalize_states or self.freeze_state_statistics:
            return
        merge_statistics(self.state_mean, self.state_var, self.state_count, forward_inputs[STATES])

    def _dist(self, features: torch.Tensor) -> Normal:
        mean = self.actor_mean(features)
        if self.ensemble_size > 1:
            mean = mean.mean(0)  # the members' average
        return Normal(mean, self.log_std.exp().expand(features.shape[0], -1))

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        inputs = {STATES: states_tensor(obs)}
        if self.instruction_buckets:
            inputs[INSTRUCTION] = instruction_features(obs, self.instruction_buckets, "policy.instruction_features")
        return inputs

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        inputs = self.forward_inputs(obs)
        features = self._features(inputs)
        dist = self._dist(features)
        flat = dist.mean if deterministic else rng.sample(dist)
        return PolicyOutput(
            actions=flat.view(-1, self.chunk, self.action_dim),
            logprobs=dist.log_prob(flat).sum(-1),
            values=self.critic(features).squeeze(-1),
            forward_inputs=inputs,
        )

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        features = self._features(forward_inputs)
        dist = self._dist(features)
        flat = actions.reshape(actions.shape[0], -1)
        return dist.log_prob(flat).sum(-1), dist.entropy().sum(-1), self.critic(features).squeeze(-1)

    def value(self, obs: Obs) -> torch.Tensor:
        return self.critic(self._features(self.forward_inputs(obs))).squeeze(-1)

    def supervised_loss(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor,
                        executed: torch.Tensor) -> torch.Tensor:
        """One actor: the base class's negative log-likelihood. An ensemble: each member's own, averaged. Fitting the
        members' average instead would make them one wide network, whose errors do not average out."""
        if self.ensemble_size == 1:
            return super().supervised_loss(forward_inputs, actions, executed)
        means = self.actor_mean(self._features(forward_inputs))  # [K, B, C * A]
        flat = actions.reshape(actions.shape[0], -1)
        logprobs = Normal(means, self.log_std.exp()).log_prob(flat).sum(-1)  # [K, B]
        return torch.stack([masked_nll(member, executed) for member in logprobs]).mean()


def states_encoder(config: MLPConfig, spec: PolicySpec) -> StatesEncoder:
    """The MLP policies' observation encoder (``MLPConfig.encoder_class``): the states, standardized as the config
    says. An algorithm that puts its own head on the policy (SAC) builds it."""
    if spec.state_dim <= 0:
        raise ValueError(f"policy.type={config.type} needs state observations (env.obs_mode 'state' or 'state+rgb')")
    if config.instruction_features:
        raise ValueError("policy.instruction_features: an algorithm that puts its own head on the policy's encoder "
                         "reads the states only (and its replay keeps no instructions): set it to 0")
    if config.ensemble_size != 1:
        raise ValueError(f"policy.ensemble_size: an algorithm that puts its own head on the policy's encoder builds "
                         f"one actor, not {config.ensemble_size}: set it to 1")
    return StatesEncoder(spec.state_dim, config.normalize_states, config.freeze_state_statistics)

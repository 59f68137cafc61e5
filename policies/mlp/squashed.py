"""Tanh-squashed Gaussian MLP over action chunks, with a Q-ensemble: the MLP policy for SAC (``policy.type: mlp_sac``).

The actor maps states [B, S] to the mean and log-std of a diagonal Gaussian over the whole chunk [B, C * A];
a sample ``u`` is squashed by ``tanh`` and scaled into the env's action bounds. Its log-prob carries the
change-of-variables correction of the squash and the scale. Greedy acting takes ``tanh(mean)``.

The critics (``build_critics``) are ``num_critics`` MLPs over (state, flattened chunk), computed in one
batched pass (a batched matmul over the ensemble axis), with an optional LayerNorm after every hidden layer.
This policy has no state-value head: ``value`` is 0 (SAC bootstraps with its critics, never with V).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal

from embodied.policies.mlp.configuration import SquashedMLPConfig
from embodied.policies.mlp.modeling import _mlp, states_tensor
from embodied.policy import Policy, PolicySpec
from embodied.types import STATES, Obs, PolicyOutput


def squash_logprob_correction(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)`` elementwise, in the stable form ``2 (log 2 - u - softplus(-2u))``."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class SquashedMLPPolicy(Policy):
    """Tanh-Gaussian MLP actor over action chunks; implements ``embodied.q_functions.QFunctionPolicy``."""

    logprob_granularity = "chunk"

    def __init__(self, config: SquashedMLPConfig, spec: PolicySpec) -> None:
        super().__init__()
        if spec.state_dim <= 0:
            raise ValueError("policy.type=mlp_sac needs state observations (env.obs_mode 'state' or 'state+rgb')")
        self.config, self.chunk, self.action_dim = config, config.action_chunk, spec.action_dim
        out = self.chunk * self.action_dim
        self.state_dim = spec.state_dim
        self.trunk = _mlp([spec.state_dim, *config.hidden_sizes], nn.ReLU, np.sqrt(2))
        self.trunk.append(nn.ReLU())
        self.mean_head = nn.Linear(config.hidden_sizes[-1], out)
        self.log_std_head = nn.Linear(config.hidden_sizes[-1], out)
        low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
        finite = np.isfinite(low) & np.isfinite(high)  # an unbounded dimension is squashed into [-1, 1]
        low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)
        # Buffers so they travel with the state dict; one entry per chunk entry [C * A].
        self.register_buffer("action_center", torch.as_tensor(np.tile((high + low) / 2, self.chunk)))
        self.register_buffer("action_half", torch.as_tensor(np.tile((high - low) / 2, self.chunk)))

    # -- QFunctionPolicy ------------------------------------------------------------------------------

    def features(self, forward_inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return forward_inputs[STATES].float()

    def _dist(self, features: torch.Tensor) -> Normal:
        h = self.trunk(features)
        c = self.config
        log_std = c.log_std_min + 0.5 * (c.log_std_max - c.log_std_min) * (torch.tanh(self.log_std_head(h)) + 1)
        return Normal(self.mean_head(h), log_std.exp())

    def _logprob(self, dist: Normal, u: torch.Tensor) -> torch.Tensor:
        """log-prob of the scaled ``tanh(u)`` [B] (``u`` [B, C * A])."""
        return (dist.log_prob(u) - squash_logprob_correction(u) - self.action_half.log()).sum(-1)

    def _scale(self, u: torch.Tensor) -> torch.Tensor:
        return (self.action_center + self.action_half * torch.tanh(u)).view(-1, self.chunk, self.action_dim)

    def sample_with_logprob(self, features: torch.Tensor,
                            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        dist = self._dist(features)
        noise = torch.randn(dist.mean.shape, generator=generator, dtype=dist.mean.dtype)
        u = dist.mean + dist.stddev * noise  # reparameterised, from the learner's generator (exact resume)
        return self._scale(u), self._logprob(dist, u)

    def build_critics(self, num_critics: int, layernorm: bool) -> nn.Module:
        sizes = [self.state_dim + self.chunk * self.action_dim, *self.config.critic_hidden_sizes, 1]
        return MLPQEnsemble(num_critics, sizes, layernorm)

    # -- Policy ---------------------------------------------------------------------------------------

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {STATES: states_tensor(obs)}

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        states = states_tensor(obs)
        dist = self._dist(states)
        u = dist.mean if deterministic else dist.sample()
        return PolicyOutput(actions=self._scale(u), logprobs=self._logprob(dist, u), values=torch.zeros(len(states)),
                            forward_inputs={STATES: states})

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        """Log-prob of ``actions`` (inverting the squash), its negation as a one-sample entropy estimate, and 0s."""
        dist = self._dist(self.features(forward_inputs))
        y = ((actions.reshape(actions.shape[0], -1) - self.action_center) / self.action_half).clamp(-1 + 1e-6, 1 - 1e-6)
        logprob = self._logprob(dist, torch.atanh(y))
        return logprob, -logprob, torch.zeros(len(logprob))

    def value(self, obs: Obs) -> torch.Tensor:
        return torch.zeros(len(np.asarray(obs[STATES])))


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied to [E, B, n_in] in one batched matmul."""

    def __init__(self, ensemble: int, n_in: int, n_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(ensemble, n_in, n_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, n_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class MLPQEnsemble(nn.Module):
    """``num_critics`` MLP critics Q(s, a) over ``sizes`` [in, hidden..., 1], batched over the ensemble."""

    def __init__(self, num_critics: int, sizes: list[int], layernorm: bool) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        # Per-member LayerNorm affine parameters [E, 1, width] (RLPD: LayerNorm keeps high-UTD critics stable).
        self.norms = nn.ParameterList()
        if layernorm:
            for width in sizes[1:-1]:
                self.norms.append(nn.Parameter(torch.ones(num_critics, 1, width)))
                self.norms.append(nn.Parameter(torch.zeros(num_critics, 1, width)))

    def q_values(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([features, actions.reshape(actions.shape[0], -1)], dim=-1)
        h = x.unsqueeze(0).expand(self.num_critics, *x.shape)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                if self.norms:
                    h = F.layer_norm(h, h.shape[-1:]) * self.norms[2 * i] + self.norms[2 * i + 1]
                h = F.relu(h)
        return h.squeeze(-1)

    def forward(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.q_values(features, actions)

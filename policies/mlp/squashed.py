"""Tanh-squashed Gaussian MLP over action chunks, with a Q-ensemble: the MLP policy for SAC (``policy.type: mlp_sac``).

The actor and the critics see the states [B, S] as they are (``StatesFeatures``, which has no parameters, so the
stop-gradient and target copy SAC keeps of a feature encoder are no-ops here). The actor is the shared
tanh-Gaussian head (``embodied.policies.squashed.SquashedGaussianPolicy``); the critics (``build_critics``) are
``num_critics`` MLPs over (state, flattened chunk) computed in one batched pass (``MLPQEnsemble``).
"""

from __future__ import annotations

import torch
from torch import nn

from embodied.policies.mlp.configuration import SquashedMLPConfig
from embodied.policies.mlp.modeling import states_tensor
from embodied.policies.squashed import MLPQEnsemble, SquashedGaussianPolicy
from embodied.policy import PolicySpec
from embodied.types import STATES, Obs


class StatesFeatures(nn.Module):
    """Forward inputs -> their states, float32 [B, S]: the MLP's features, with nothing to train."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs[STATES].float()


class SquashedMLPPolicy(SquashedGaussianPolicy):
    """Tanh-Gaussian MLP actor over action chunks; implements ``embodied.q_functions.QFunctionPolicy``."""

    def __init__(self, config: SquashedMLPConfig, spec: PolicySpec) -> None:
        super().__init__()
        if spec.state_dim <= 0:
            raise ValueError("policy.type=mlp_sac needs state observations (env.obs_mode 'state' or 'state+rgb')")
        self.config, self.state_dim = config, spec.state_dim
        self.states = StatesFeatures()
        self._build_actor(spec.state_dim, config.hidden_sizes, (config.log_std_min, config.log_std_max),
                          config.action_chunk, spec)

    @property
    def feature_encoder(self) -> nn.Module:
        return self.states

    def build_critics(self, num_critics: int, layernorm: bool) -> nn.Module:
        sizes = [self.state_dim + self.chunk * self.action_dim, *self.config.critic_hidden_sizes, 1]
        return MLPQEnsemble(num_critics, sizes, layernorm)

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {STATES: states_tensor(obs)}

"""Tanh-squashed Gaussian MLP over action chunks: the MLP policy SAC trains (``policy.type: mlp`` under SAC; the alias
``mlp_sac``).

The policy and SAC's critics see the states [B, S] (``StatesFeatures``: as they are, or standardized with
``normalize_states``; it has no parameters, so the stop-gradient and target copy SAC keeps of a feature encoder
only carry its statistics). The policy is the shared tanh-Gaussian head
(``embodied.policies.squashed.SquashedGaussianPolicy``). The critics are SAC's: the learner
builds ``num_critics`` MLPs of ``algorithm.critic_hidden_sizes`` over (state, flattened chunk) from this policy's
``feature_size`` and chunks (``embodied.algorithms.sac_networks``).
"""

from __future__ import annotations

import torch
from torch import nn

from embodied.core.types import STATES, Obs
from embodied.policies.mlp.configuration import SquashedMLPConfig
from embodied.policies.mlp.modeling import merge_statistics, standardize, states_tensor
from embodied.policies.squashed import SquashedGaussianPolicy
from embodied.policy.base import PolicySpec


class StatesFeatures(nn.Module):
    """Forward inputs -> their states, float32 [B, S], standardized with ``normalize``: the MLP's features, with
    nothing to train. The statistics are buffers, so weight sync and checkpoints carry them, and SAC's target copy
    of the encoder takes them from the online one."""

    def __init__(self, state_dim: int, normalize: bool) -> None:
        super().__init__()
        self.normalize = normalize
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_var", torch.ones(state_dim))
        self.register_buffer("state_count", torch.tensor(1e-4))

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        states = inputs[STATES].float()
        return standardize(states, self.state_mean, self.state_var) if self.normalize else states


class SquashedMLPPolicy(SquashedGaussianPolicy):
    """Tanh-Gaussian MLP policy over action chunks; implements ``embodied.policy.q_functions.QFunctionPolicy``."""

    def __init__(self, config: SquashedMLPConfig, spec: PolicySpec) -> None:
        super().__init__()
        if spec.state_dim <= 0:
            raise ValueError(f"policy.type={config.type} needs state observations (env.obs_mode 'state' or "
                             "'state+rgb')")
        self.config, self.state_dim = config, spec.state_dim
        self.states = StatesFeatures(spec.state_dim, config.normalize_states)
        self.observes = (STATES,) if config.normalize_states else ()  # what the actor's ``observe`` merges
        self._build_actor(spec.state_dim, config.hidden_sizes, (config.log_std_min, config.log_std_max),
                          config.action_chunk, spec)

    @property
    def feature_encoder(self) -> nn.Module:
        return self.states

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {STATES: states_tensor(obs)}

    @torch.no_grad()
    def observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """Merge the batch's states into the running statistics (with ``normalize_states``, unless frozen)."""
        if self.config.normalize_states and not self.config.freeze_state_statistics:
            f = self.states
            merge_statistics(f.state_mean, f.state_var, f.state_count, forward_inputs[STATES])

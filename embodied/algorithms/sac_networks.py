"""SAC's networks: the Q-ensemble the learner builds from what its policy exposes (``algorithm.name: sac``, ``dsrl``).

The critics belong to the algorithm, not to the policy: the policy offers its features (``feature_encoder``, whose
width is ``feature_size``) and its action chunks (``chunk`` x ``action_dim``); ``build_critics`` shapes
``algorithm.num_critics`` MLPs over (features, flattened chunk) from them, with an optional LayerNorm after every
hidden layer (``algorithm.critic_layernorm``, RLPD's), of hidden widths ``algorithm.critic_hidden_sizes``.

- ``EnsembleLinear`` (``embodied.policy.ensemble``): ``E`` independent linear layers in one batched matmul.
- ``MLPQEnsemble``: every critic in one batched pass (``embodied.policy.q_functions.QEnsemble``).

Their widths are ``algorithm.critic_hidden_sizes``; their state dicts are a checkpoint's ``critics`` and
``target_critics`` in the learner's state.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# EnsembleLinear lived here before the MLP policy's ensemble shared it; kept importable from here for users' code
from embodied.policy.ensemble import EnsembleLinear  # noqa: F401


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
        """Q(s, a) of every critic: ``features`` [B, F], ``actions`` [B, C, A] -> [E, B]."""
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


def critic_source(policy: Any) -> Any:
    """The policy whose features and chunks the critics read: the policy itself, or, for a policy that acts through
    an inner policy in its own space (DSRL's noise policy over recorded features), that one."""
    if hasattr(policy, "feature_size"):
        return policy
    inner = getattr(policy, "noise_policy", None)
    if inner is not None and hasattr(inner, "feature_size"):
        return inner
    raise ValueError(f"{type(policy).__name__}: the critics need the policy's feature width (feature_size), "
                     "action chunk (chunk) and action dimension (action_dim)")


def critic_sizes(policy: Any, hidden_sizes: list[int]) -> list[int]:
    """[features + chunk * action_dim, *hidden_sizes, 1]: the critics' layer widths over ``policy``'s features."""
    source = critic_source(policy)
    return [source.feature_size + source.chunk * source.action_dim, *hidden_sizes, 1]


def build_critics(policy: Any, num_critics: int, hidden_sizes: list[int], layernorm: bool) -> MLPQEnsemble:
    """A fresh ``MLPQEnsemble`` of ``num_critics`` critics of ``hidden_sizes`` over ``policy``'s features and action
    chunks."""
    return MLPQEnsemble(num_critics, critic_sizes(policy, hidden_sizes), layernorm)

"""What SAC asks of a policy: ``QFunctionPolicy``, a small protocol beside ``embodied.policy.base.Policy``.

A policy that has it offers a tanh-squashed Gaussian over action chunks (``sample_with_logprob``) and the
module that turns its forward inputs into the features its head and the critics see (``feature_encoder``, of width
``feature_size``). The Q-ensemble is the learner's: it builds it from those features and the policy's action
chunks, trains and holds it (``embodied.algorithms``), so it never travels to rollout workers.

The feature encoder is shared as DrQ and RLPD share theirs: its parameters live in the policy (rollouts act
through them, weight sync sends them) but only the critics' loss trains them; the policy's loss sees its features
detached (stop-gradient), and the TD target reads a polyak copy of it beside the target critics.
A policy without it is refused by name before any worker starts (``require_q_functions``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import nn

from embodied.core.registry import load_entry_point
from embodied.policy.config import PolicyConfig


class QEnsemble(Protocol):
    """``num_critics`` Q-functions computed in one batched pass."""

    num_critics: int

    def q_values(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of every critic: ``features`` [B, F], ``actions`` [B, C, A] -> [E, B]."""


@runtime_checkable
class QFunctionPolicy(Protocol):
    """The methods SAC needs beside ``Policy``'s (``act`` samples the same tanh-Gaussian; greedy acts its mean)."""

    @property
    def feature_encoder(self) -> nn.Module:
        """A module mapping ``forward_inputs(obs)`` to what the policy's head and the critics see of it: [B, F]. Its
        parameters (none for states, an image encoder for a CNN) are trained by the critics' loss only."""

    def sample_with_logprob(self, features: torch.Tensor,
                            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised chunk [B, C, A] from the tanh-squashed Gaussian, and its log-prob [B] (with the
        tanh correction), differentiable with respect to the policy's parameters; the noise is drawn from
        ``generator`` (the learner's, so a resumed run draws the same)."""

    def mode_error(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[B]: how far the greedy chunk is from ``actions`` [B, C, A] (squared error in the action box scaled to
        [-1, 1]), differentiable with respect to the policy; ``algorithm.bc_weight``'s behaviour-cloning term."""


def require_q_functions(policy: PolicyConfig, algorithm: str) -> None:
    """Raise ``ValueError`` naming ``policy.type`` if the policy class it builds lacks ``QFunctionPolicy``."""
    cls = load_entry_point(type(policy).model_class)
    needed = ("feature_encoder", "sample_with_logprob", "mode_error")
    missing = [name for name in needed if not hasattr(cls, name)]
    if missing:
        raise ValueError(f"algorithm.name={algorithm} needs a policy with Q-functions and a tanh-Gaussian action "
                         f"(QFunctionPolicy: {', '.join(missing)}); policy.type={policy.type} has none")

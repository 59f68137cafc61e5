"""Tanh-squashed Gaussian over action chunks from camera images: the CNN policy for SAC and RLPD
on pixels (``policy.type: cnn`` under SAC; the alias ``cnn_sac``), shaped as DrQ (Kostrikov et al. 2020) and RLPD's
pixel agent are.

- **Encoder.** The CNN policies' observation encoder (``CNNFeatures``: ``ImageEncoder``'s convolutions and linear
  layer over ``main_images``, the same weights over ``wrist_images``, a small MLP over states when the env gives
  them) turns the forward inputs into features [B, F]. It is the policy's ``feature_encoder``: rollouts act
  through it and weight sync sends it, but only the critics' loss trains it; the actor sees its features
  detached, and the TD target reads a polyak copy of it (``embodied.algorithms.sac.SACLearner``).
- **Actor.** The shared tanh-Gaussian head (``embodied.policies.squashed.SquashedGaussianPolicy``) over the
  features: an MLP of ``hidden_sizes``, then the mean and log-std of the whole chunk [B, C * A].
- **Critics.** SAC's, built by the learner from this policy's ``feature_size`` and chunks
  (``embodied.algorithms.sac_networks``): ``num_critics`` MLPs of ``algorithm.critic_hidden_sizes`` over (features,
  flattened chunk), one batched pass, LayerNorm with ``algorithm.critic_layernorm``.

Images stay uint8 from the env through replay until the encoder's first line divides them by 255; the learner
shifts them at random first (``algorithm.image_shift``, DrQ's augmentation).
"""

from __future__ import annotations

import torch
from torch import nn

from embodied.core.types import Obs
from embodied.policies.cnn.configuration import SquashedCNNConfig
from embodied.policies.cnn.modeling import CNNFeatures
from embodied.policies.squashed import SquashedGaussianPolicy
from embodied.policy.base import PolicySpec


class SquashedCNNPolicy(SquashedGaussianPolicy):
    """Tanh-Gaussian actor over a CNN encoder; implements ``embodied.policy.q_functions.QFunctionPolicy``."""

    def __init__(self, config: SquashedCNNConfig, spec: PolicySpec) -> None:
        super().__init__()
        self.config = config
        self.features = CNNFeatures(config, spec, config.type)
        self._build_actor(self.features.out_features, config.hidden_sizes, (config.log_std_min, config.log_std_max),
                          config.action_chunk, spec)

    @property
    def feature_encoder(self) -> nn.Module:
        return self.features

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """uint8 images (copied) and float32 states, on the CPU."""
        return self.features.forward_inputs(obs)

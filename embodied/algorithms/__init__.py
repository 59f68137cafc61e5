"""RL maths as pure functions of tensors."""

from __future__ import annotations

from embodied.algorithms.gae import compute_gae
from embodied.algorithms.ppo import PPOLossOutput, normalize_advantages, ppo_loss

__all__ = ["PPOLossOutput", "compute_gae", "normalize_advantages", "ppo_loss"]

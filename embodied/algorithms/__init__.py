"""RL maths as pure functions of tensors, and the algorithms the actor trains with.

Algorithms are found by ``algorithm.name`` through ``embodied.registry.ALGORITHMS`` (entry points
of the ``embodied.algorithms`` group: ``ppo``, ``grpo``, ``sac``, ``dsrl``), as envs and policies are.
"""

from __future__ import annotations

from embodied.algorithms.base import Algorithm, LossOutput, RolloutReset, is_off_policy, worker_policy_config
from embodied.algorithms.gae import compute_gae
from embodied.algorithms.grpo import episode_mean_weights, group_advantages, grpo_loss
from embodied.algorithms.ppo import PPOLossOutput, normalize_advantages, ppo_loss

__all__ = ["Algorithm", "LossOutput", "PPOLossOutput", "RolloutReset", "compute_gae", "episode_mean_weights",
           "group_advantages", "grpo_loss", "is_off_policy", "normalize_advantages", "ppo_loss",
           "worker_policy_config"]

"""The learning-rate schedule of the on-policy family (``OnPolicyConfig.anneal_lr``, ``lr_warmup_iterations``): PPO,
GRPO, RLOO and plug-ins set each optimizer step's rate from it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embodied.config.algorithm import OnPolicyConfig


def learning_rate(cfg: OnPolicyConfig, lr: float, total_iterations: int, iteration: int, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``iteration`` (1-based): ``lr`` decayed linearly to
    0 over ``total_iterations`` (``cfg.anneal_lr``) times a linear rise over the first ``cfg.lr_warmup_iterations``
    policy iterations. A function of the position alone, so a resumed run takes the same steps."""
    if cfg.anneal_lr:
        lr *= 1.0 - (iteration - 1) / max(total_iterations, 1)
    warm = cfg.lr_warmup_iterations
    policy_iteration = iteration - cfg.warmup_iterations()  # the value head alone trains before
    if warm and policy_iteration > 0:
        steps = cfg.update_epochs * cfg.num_minibatches
        lr *= min(1.0, (policy_iteration - 1 + (step + 1) / steps) / warm)
    return lr

"""AWAC, advantage-weighted actor-critic (Nair et al. 2020; ``algorithm.name: awac``): SAC's learner, critics, replay
and loop (``embodied.algorithms.sac``) with another policy objective. The policy regresses its greedy chunk onto
replay's chunks, each weighted by ``exp(advantage / awr_temperature)`` (``advantage_weighted_loss``), where the
advantage is the row's chunk's value over the policy's own sample, from the critics before this step's update. The
critics' action gradient never reaches the policy, which only moves toward chunks replay holds: from an SFT clone
and demonstrations (RLPD's replay), it improves on them without first unlearning them.

    advantage = ensemble_q(q, policy_q) - ensemble_q(pi_q, policy_q)                 # [B], no gradient
    loss = advantage_weighted_loss(policy.mode_error(features, actions), advantage, awr_temperature, awr_max_weight)

Its checkpoints and metrics are ``awac``'s; a checkpoint that saved it as ``sac`` resumes as ``awac``
(``AWACConfig.checkpoint_moves``, ``embodied.checkpoint.migrate``; its config through ``loader.saved_form``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from embodied.algorithms.sac import PolicyBatch, SACLearner, ensemble_q

if TYPE_CHECKING:
    from embodied.algorithms.awac_config import AWACConfig


def advantage_weighted_loss(mode_error: torch.Tensor, advantage: torch.Tensor, temperature: float,
                            max_weight: float = 100.0) -> torch.Tensor:
    """AWAC's policy loss in regression form: ``mean(min(exp(A / temperature), max_weight) * error)`` over replay
    rows, ``mode_error`` [B] the greedy chunk's squared distance to the row's chunk and ``advantage`` [B] that chunk's
    ``Q(s, a) - Q(s, a ~ pi)``. The weights carry no gradient; the critics' action gradient never reaches the policy,
    which only moves toward chunks that were taken and scored above its own."""
    weights = torch.exp(advantage.detach() / temperature).clamp(max=max_weight)
    return (weights * mode_error).mean()


class AWACLearner(SACLearner):
    """SAC's learner whose policy objective is AWAC's (``AWACConfig.algorithm_class``); everything else (the critics,
    their TD target, the temperature, the encoder, checkpoints, metric names) is ``SACLearner``'s."""

    cfg: AWACConfig
    name: ClassVar[str] = "awac"

    def policy_objective(self, b: PolicyBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """AWAC's loss (``advantage_weighted_loss``): replay's chunks weighted by their advantage over the policy's
        sample, with TD3+BC's term on the demonstration rows (``with_demo_term``); no entropy term."""
        c = self.cfg
        advantage = ensemble_q(b.q, c.policy_q) - ensemble_q(b.pi_q.detach(), c.policy_q)
        error = self.policy.mode_error(b.features, b.actions)  # type: ignore[attr-defined]
        return self.with_demo_term(advantage_weighted_loss(error, advantage, c.awr_temperature, c.awr_max_weight), b)

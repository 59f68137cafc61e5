"""RLOO, REINFORCE leave-one-out (``algorithm.name: rloo``): GRPO's loop (``embodied.algorithms.grpo``: groups of
``group_size`` envs from one reset, one whole episode each, the clipped surrogate, no critic) with another baseline.
An episode's advantage is its score minus the mean score of the *other* ``k - 1`` episodes of its group:

    advantage_i = s_i - (sum_j s_j - s_i) / (k - 1)  =  k / (k - 1) * (s_i - mean(s))

an unbiased baseline (it does not hold s_i), not divided by the group's standard deviation, so a group whose
outcomes barely differ gets small advantages rather than unit ones. Groups whose scores are all equal carry no
signal and are dropped, as GRPO drops them. Metrics: ``rloo/groups``, ``rloo/dropped_groups``, ``rloo/score_mean``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from embodied.algorithms.grpo import GRPO

if TYPE_CHECKING:
    from embodied.algorithms.rloo_config import RLOOConfig


def leave_one_out_advantages(scores: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores [N] in consecutive groups of ``group_size`` -> ``(advantages [N], kept [N] bool)``: each score minus
    the mean of the rest of its group; groups with no spread get 0 and ``kept`` False."""
    if group_size < 2 or scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not split into groups of {group_size} (>= 2)")
    groups = scores.double().view(-1, group_size)
    others = (groups.sum(1, keepdim=True) - groups) / (group_size - 1)
    kept = (groups.max(1, keepdim=True).values - groups.min(1, keepdim=True).values) > 0
    adv = torch.where(kept, groups - others, torch.zeros_like(groups))
    return adv.view(-1).to(scores.dtype), kept.expand_as(groups).reshape(-1)


class RLOO(GRPO):
    """GRPO's update with leave-one-out advantages (see the module docstring)."""

    prefix: ClassVar[str] = "rloo"
    summed_metrics: ClassVar[frozenset[str]] = frozenset({"rloo/groups", "rloo/dropped_groups"})
    cfg: RLOOConfig  # type: ignore[assignment]

    def advantages(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return leave_one_out_advantages(scores, self.cfg.group_size)

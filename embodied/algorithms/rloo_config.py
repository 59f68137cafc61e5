"""``algorithm.name: rloo``'s configuration: GRPO's fields (groups from one reset, whole episodes, the clipped
surrogate, ``grpo_score`` and ``grpo_loss_mean``) with REINFORCE leave-one-out's advantages
(``embodied.algorithms.rloo``). Torch-free, so that loading a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.algorithms.grpo_config import GRPOConfig


@dataclass
class RLOOConfig(GRPOConfig):
    """The ``algorithm:`` section of an RLOO run (Kool et al. 2019; Ahmadian et al. 2024, as VLA RL uses it): no
    critic; each episode's advantage is its score minus the mean score of the other episodes of its group, not
    divided by the group's spread as GRPO's is. Every other field is GRPO's."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.rloo:RLOO"

    name: str = "rloo"  # registered algorithm name

"""``algorithm.name: awac``'s configuration: SAC's (``SACConfig``'s fields: critics, replay, demonstrations, pacing)
with AWAC's policy objective (``embodied.algorithms.awac``), whose two fields live only here. Torch-free, so that
loading a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from embodied.algorithms.sac_config import SACConfig, learner_moves
from embodied.config.schema import KeyMove

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class AWACConfig(SACConfig):
    """The ``algorithm:`` section of an AWAC run (Nair et al. 2020): SAC's learner and loop, whose policy regresses its
    greedy chunk onto replay's chunks weighted by their advantage instead of following the critics' action gradient.
    Its policy loss has no entropy term; the temperature still enters the TD target (``init_alpha``, ``target_entropy``
    set it, as the LIBERO-Object recipe does to turn it off)."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.awac:AWACLearner"
    split_off: ClassVar[dict[str, str]] = {}  # SAC's awr_temperature is this algorithm's own field
    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = learner_moves("awac", saved_as="sac")

    name: str = "awac"  # registered algorithm name
    # Temperature of the advantage weights exp(advantage / awr_temperature), in units of the reward: lower follows
    # the best-scored chunks more greedily, higher clones replay more evenly.
    awr_temperature: float = 1.0
    awr_max_weight: float = 100.0  # cap on each row's weight exp(advantage / awr_temperature)

    def validate(self, cfg: Config) -> list[str]:
        """SAC's checks and the advantage weights' temperature and cap."""
        return super().validate(cfg) + awr_problems(self.awr_temperature, self.awr_max_weight)


def awr_problems(temperature: float, max_weight: float) -> list[str]:
    """The advantage weights' temperature and cap (AWAC's and IQL's policy loss), each > 0."""
    p = []
    if not temperature > 0:
        p.append(f"algorithm.awr_temperature: the advantage weights' temperature must be > 0, got {temperature}")
    if not max_weight > 0:
        p.append(f"algorithm.awr_max_weight: the cap on each row's advantage weight must be > 0, got {max_weight}")
    return p

"""``algorithm.name: iql``'s configuration: SAC's fields that IQL shares (critics and their targets, replay,
demonstrations, pacing, critic warm-up) with IQL's own (``embodied.algorithms.iql``). Torch-free, so that loading a
config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from embodied.algorithms.awac_config import awr_problems
from embodied.algorithms.sac_config import ENCODER_MOVES, SACConfig
from embodied.config.schema import KeyMove

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class IQLConfig(SACConfig):
    """The ``algorithm:`` section of an IQL run (Kostrikov et al., ICLR 2022): Q learned by TD towards a state value
    V, V by expectile regression onto the target critics' values of replay's own chunks (never of the policy's),
    the policy by advantage-weighted regression onto replay's chunks. No entropy term: ``init_alpha`` and
    ``target_entropy`` are not used. Offline from demonstrations (``demos``, ``critic_warmup_iterations``: the
    critics and V fit before the policy moves), then online on the same loss."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.iql:IQLLearner"
    split_off: ClassVar[dict[str, str]] = {}
    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = ENCODER_MOVES  # its first checkpoints are format 3

    name: str = "iql"  # registered algorithm name
    expectile: float = 0.7  # tau of V's expectile loss: 0.5 is the mean of Q over replay's chunks, -> 1 their max
    awr_temperature: float = 0.33  # 1 / beta: the policy's weights are exp(advantage / awr_temperature)
    awr_max_weight: float = 100.0  # cap on each row's weight
    value_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # V's layers over the features

    def validate(self, cfg: Config) -> list[str]:
        """SAC's checks, then the expectile, the weights' temperature and cap, and V's widths."""
        p = super().validate(cfg)
        if not 0 < self.expectile < 1:
            p.append(f"algorithm.expectile: V's expectile must be in (0, 1) (0.5: the mean), got {self.expectile}")
        p += awr_problems(self.awr_temperature, self.awr_max_weight)
        if not self.value_hidden_sizes or any(v < 1 for v in self.value_hidden_sizes):
            p.append(f"algorithm.value_hidden_sizes: need at least one layer, every width >= 1, got "
                     f"{self.value_hidden_sizes}")
        return p

"""``algorithm.name: crossq``'s configuration: SAC's fields (replay, pacing, temperature, demonstrations) with
CrossQ's critics (``embodied.algorithms.crossq``). Torch-free, so that loading a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from embodied.algorithms.sac_config import ENCODER_MOVES, SACConfig
from embodied.config.schema import KeyMove

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class CrossQConfig(SACConfig):
    """The ``algorithm:`` section of a CrossQ run (Bhatt et al., ICLR 2024): SAC without target networks, its critics
    batch-normalised and run once on the current and the next rows together, the policy updated every
    ``policy_delay`` critic steps, Adam with ``beta1 = adam_beta1``. ``tau`` is not used (no targets)."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.crossq:CrossQLearner"
    split_off: ClassVar[dict[str, str]] = {"awr_temperature": "awac"}
    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = ENCODER_MOVES  # its first checkpoints are format 3

    name: str = "crossq"  # registered algorithm name
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [2048, 2048])  # CrossQ's wide critics
    bn_momentum: float = 0.01  # how far each step moves the running statistics (torch's sense: Flax's 0.99)
    bn_eps: float = 1e-3  # added to the variance before the square root
    policy_delay: int = 3  # critic steps per policy (and temperature) step
    adam_beta1: float = 0.5  # Adam's first-moment decay for all three optimizers (CrossQ's 0.5; SAC's 0.9)

    def validate(self, cfg: Config) -> list[str]:
        """SAC's checks, then CrossQ's: no LayerNorm (batch norm stands for it), ranges of its own fields."""
        p = super().validate(cfg)
        if self.critic_layernorm:
            p.append("algorithm.critic_layernorm: CrossQ's critics are batch-normalised; LayerNorm is RLPD's, for "
                     "SAC's critics (algorithm.name: sac). Leave it false")
        if not 0 < self.bn_momentum <= 1:
            p.append(f"algorithm.bn_momentum: the running statistics' rate must be in (0, 1], got {self.bn_momentum}")
        if not self.bn_eps > 0:
            p.append(f"algorithm.bn_eps: must be > 0, got {self.bn_eps}")
        if self.policy_delay < 1:
            p.append(f"algorithm.policy_delay: critic steps per policy step must be >= 1, got {self.policy_delay}")
        if not 0 <= self.adam_beta1 < 1:
            p.append(f"algorithm.adam_beta1: Adam's first-moment decay must be in [0, 1), got {self.adam_beta1}")
        if self.batch_size < 2:
            p.append(f"algorithm.batch_size: batch normalisation needs at least 2 rows a batch, got {self.batch_size}")
        return p

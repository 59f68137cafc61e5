"""Configuration of the Gaussian MLP policy (``policy.type: mlp``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from embodied.policy.config import PolicyConfig


@dataclass
class MLPConfig(PolicyConfig):
    type: str = "mlp"  # registered policy name
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of actor and critic layers
    activation: Literal["tanh", "relu"] = "tanh"  # hidden activation
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension
    normalize_states: bool = False  # standardize states with running statistics of the rollouts
    freeze_state_statistics: bool = False  # keep the normalization statistics as loaded (e.g. fitted by SFT to the demonstrations)

    def required_observations(self) -> set[str]:
        return {"states"}

    def validate(self) -> list[str]:
        """At least one hidden layer, every width positive."""
        if not self.hidden_sizes or any(v < 1 for v in self.hidden_sizes):
            return [f"policy.hidden_sizes: need at least one layer, every width >= 1, got {self.hidden_sizes}"]
        return []

    model_class: ClassVar[str] = "embodied.policies.mlp.modeling:MLPPolicy"


@dataclass
class SquashedMLPConfig(PolicyConfig):
    """A tanh-squashed Gaussian MLP with a Q-ensemble, for off-policy training (``algorithm.name: sac``)."""

    type: str = "mlp_sac"  # registered policy name
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of the actor's hidden layers
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of every critic's layers
    log_std_min: float = -5.0  # the actor's log-std is squashed into [log_std_min, log_std_max] (CleanRL's bounds)
    log_std_max: float = 2.0  # upper bound of the actor's log-std
    # Standardize states (actor and critics alike) with running statistics: of the demonstrations (RLPD) and every
    # epoch the actor receives, or fitted by SFT. States whose entries differ by orders of magnitude need it.
    normalize_states: bool = False
    freeze_state_statistics: bool = False  # keep the statistics as loaded or fitted to the demonstrations

    architecture_fields: ClassVar[tuple[str, ...]] = ("hidden_sizes",)

    def required_observations(self) -> set[str]:
        return {"states"}

    def validate(self) -> list[str]:
        """At least one hidden layer in actor and critics, every width positive; log-std bounds in order."""
        return squashed_head_problems(self.hidden_sizes, self.critic_hidden_sizes, self.log_std_min, self.log_std_max)

    model_class: ClassVar[str] = "embodied.policies.mlp.squashed:SquashedMLPPolicy"



def squashed_head_problems(hidden_sizes: list[int], critic_hidden_sizes: list[int], log_std_min: float,
                           log_std_max: float) -> list[str]:
    """What a SAC policy's config (``mlp_sac``, ``cnn_sac``) can get wrong about its actor and critic heads: at
    least one hidden layer in each, every width positive, and the log-std bounds in order."""
    problems = [f"policy.{name}: need at least one layer, every width >= 1, got {sizes}"
                for name, sizes in (("hidden_sizes", hidden_sizes), ("critic_hidden_sizes", critic_hidden_sizes))
                if not sizes or any(v < 1 for v in sizes)]
    if not log_std_min < log_std_max:
        problems.append(f"policy.log_std_min: must be below log_std_max={log_std_max}, got {log_std_min}")
    return problems

"""Configuration of the Gaussian MLP policy (``policy.type: mlp``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from embodied.policy_config import PolicyConfig


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

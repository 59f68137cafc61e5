"""The linear Gaussian policy's configuration (``policy:`` section). Torch-free: the config loader imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.api import PolicyConfig, PolicySpec


@dataclass
class LinearConfig(PolicyConfig):
    """A Gaussian whose mean, and a value, are linear in (some of) the states."""

    type: str = "linear"  # the policy's name
    state_indices: list[int] | None = None  # which entries of `states` it reads (null: all)
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension

    model_class: ClassVar[str] = "my_policy.modeling:LinearPolicy"
    architecture_fields: ClassVar[tuple[str, ...]] = ("state_indices",)  # they shape the weights: init_from checks

    def required_observations(self) -> set[str]:
        return {"states"}  # env.obs_mode must give states

    def validate(self) -> list[str]:
        """What the fields alone can get wrong."""
        if self.state_indices is not None and (not self.state_indices or min(self.state_indices) < 0
                                               or len(set(self.state_indices)) < len(self.state_indices)):
            return [f"policy.state_indices: distinct indices >= 0, or null, got {self.state_indices}"]
        return []

    def spec_problems(self, spec: PolicySpec) -> list[str]:
        """What the fields get wrong against the env's spaces (one env built in the driver, before any worker)."""
        if self.state_indices and max(self.state_indices) >= spec.state_dim:
            return [f"policy.state_indices: the env's states have {spec.state_dim} entries, got {self.state_indices}"]
        return []

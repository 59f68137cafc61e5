"""Configuration of the MLP policies: the Gaussian actor-critic (``policy.type: mlp``) and its tanh-squashed
Gaussian actor, which SAC trains (``with_head("tanh_gaussian")``; registered as ``mlp_sac`` too, an alias)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from embodied.policy.config import PolicyConfig


@dataclass
class MLPConfig(PolicyConfig):
    """A Gaussian MLP over the state vector, with a value head (PPO, GRPO, SFT, DAgger; SAC squashes it)."""

    type: str = "mlp"  # registered policy name
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of actor and critic layers
    activation: Literal["tanh", "relu"] = "tanh"  # hidden activation
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension
    normalize_states: bool = False  # standardize states with running statistics of the rollouts
    freeze_state_statistics: bool = False  # keep the normalization statistics as loaded (e.g. fitted by SFT to the demonstrations)

    head: ClassVar[str] = "gaussian"
    # Under SAC (a tanh_gaussian head): SquashedMLPConfig with these fields (its trunk is ReLU's, whatever activation)
    heads: ClassVar[dict[str, str]] = {"tanh_gaussian": "mlp_sac"}

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
    """A tanh-squashed Gaussian MLP, the policy SAC trains (``policy.type: mlp`` under ``algorithm.name: sac``; the
    critics are SAC's, ``algorithm.critic_hidden_sizes``)."""

    type: str = "mlp_sac"  # registered policy name (an alias: policy.type=mlp under SAC builds this)
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of the actor's hidden layers
    log_std_min: float = -5.0  # the actor's log-std is squashed into [log_std_min, log_std_max] (CleanRL's bounds)
    log_std_max: float = 2.0  # upper bound of the actor's log-std
    # Standardize states (actor and critics alike) with running statistics: of the demonstrations (RLPD) and every
    # epoch the actor receives, or fitted by SFT. States whose entries differ by orders of magnitude need it.
    normalize_states: bool = False
    freeze_state_statistics: bool = False  # keep the statistics as loaded or fitted to the demonstrations

    architecture_fields: ClassVar[tuple[str, ...]] = ("hidden_sizes",)
    head: ClassVar[str] = "tanh_gaussian"

    def required_observations(self) -> set[str]:
        return {"states"}

    def validate(self) -> list[str]:
        """At least one hidden layer, every width positive; log-std bounds in order."""
        return squashed_head_problems(self.hidden_sizes, self.log_std_min, self.log_std_max)

    model_class: ClassVar[str] = "embodied.policies.mlp.squashed:SquashedMLPPolicy"



def squashed_head_problems(hidden_sizes: list[int], log_std_min: float, log_std_max: float) -> list[str]:
    """What a tanh-Gaussian policy's config (MLP's, CNN's) can get wrong about its head: at least one hidden layer,
    every width positive, and the log-std bounds in order."""
    problems = ([] if hidden_sizes and all(v >= 1 for v in hidden_sizes) else
                [f"policy.hidden_sizes: need at least one layer, every width >= 1, got {hidden_sizes}"])
    if not log_std_min < log_std_max:
        problems.append(f"policy.log_std_min: must be below log_std_max={log_std_max}, got {log_std_min}")
    return problems

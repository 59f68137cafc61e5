"""Configuration of the MLP policy: the Gaussian actor-critic over the state vector (``policy.type: mlp``). Under SAC
the algorithm puts its tanh-squashed Gaussian on the policy's encoder (``encoder_class``) with these hidden sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from embodied.policy.config import PolicyConfig


@dataclass
class MLPConfig(PolicyConfig):
    """A Gaussian MLP over the state vector, with a value head (PPO, GRPO, SFT, DAgger; SAC squashes it)."""

    type: str = "mlp"  # registered policy name
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of actor and critic layers
    activation: Literal["tanh", "relu"] = "tanh"  # hidden activation (of the policy's own heads)
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension
    # After policy.init_from loads its weights, every action dimension's log std is set to this: a clone's Gaussian,
    # fitted by likelihood, is narrow (log std near -3), so PPO's first steps in its mean move the ratio far. null:
    # keep the checkpoint's.
    init_from_log_std: float | None = None
    normalize_states: bool = False  # standardize states with running statistics of the rollouts
    freeze_state_statistics: bool = False  # keep the normalization statistics as loaded (e.g. fitted by SFT to the demonstrations)
    # Condition on the task's instruction: its words hashed into this many buckets beside the states (0: off). One
    # policy over several tasks whose states do not say which object is the target's kind needs it.
    instruction_features: int = 0
    # Independent actor means (each its own initialization, trained on the same batches, each on its own likelihood)
    # whose average is the policy's mean: a deep ensemble, which steadies a behaviour clone whose per-task success
    # swings with the seed. 1: one actor.
    ensemble_size: int = 1

    model_class: ClassVar[str] = "embodied.policies.mlp.modeling:MLPPolicy"
    encoder_class: ClassVar[str] = "embodied.policies.mlp.modeling:states_encoder"
    head_fields: ClassVar[tuple[str, ...]] = ("activation", "init_log_std", "init_from_log_std")
    # init_from must match these
    architecture_fields: ClassVar[tuple[str, ...]] = ("hidden_sizes", "instruction_features", "ensemble_size")
    aliases: ClassVar[dict[str, dict[str, Any]]] = {"mlp_sac": {}}  # SAC's actor over this policy's encoder, before

    def required_observations(self) -> set[str]:
        return {"states"}

    def head_sizes(self) -> list[int]:
        return list(self.hidden_sizes)

    def validate(self) -> list[str]:
        """At least one hidden layer, every width positive; instruction buckets not negative; one actor or more;
        init_from_log_std only with init_from."""
        problems = []
        if not self.hidden_sizes or any(v < 1 for v in self.hidden_sizes):
            problems.append(f"policy.hidden_sizes: need at least one layer, every width >= 1, got {self.hidden_sizes}")
        if self.instruction_features < 0:
            problems.append(f"policy.instruction_features: need 0 (off) or a number of buckets, got "
                            f"{self.instruction_features}")
        if self.ensemble_size < 1:
            problems.append(f"policy.ensemble_size: need 1 (one actor) or more, got {self.ensemble_size}")
        if self.init_from_log_std is not None and not self.init_from:
            problems.append("policy.init_from_log_std: resets the log std that policy.init_from loads, but no "
                            "policy.init_from is set; give the checkpoint, or set policy.init_log_std instead")
        return problems

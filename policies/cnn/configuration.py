"""Configuration of the Gaussian CNN policy (``policy.type: cnn``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from embodied.policy_config import PolicyConfig


@dataclass
class CNNConfig(PolicyConfig):
    type: str = "cnn"  # registered policy name
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])  # output channels of each conv layer
    kernel_sizes: list[int] = field(default_factory=lambda: [8, 4, 3])  # square kernel of each conv layer
    strides: list[int] = field(default_factory=lambda: [4, 2, 1])  # stride of each conv layer
    image_features: int = 256  # width of the linear layer after the convs (per camera)
    state_features: int = 64  # width of the two-layer state MLP (when the env gives states)
    hidden_sizes: list[int] = field(default_factory=lambda: [256])  # widths of the actor and critic heads
    use_wrist_images: bool = True  # also encode wrist_images (same encoder) when the env provides them
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension

    def required_observations(self) -> set[str]:
        return {"images"}

    model_class: ClassVar[str] = "embodied.policies.cnn.modeling:CNNPolicy"

    def validate(self) -> list[str]:
        """Conv lists of one length, positive sizes."""
        p: list[str] = []
        lists = {"channels": self.channels, "kernel_sizes": self.kernel_sizes, "strides": self.strides}
        if len({len(v) for v in lists.values()}) != 1:
            p.append("policy.channels, policy.kernel_sizes, policy.strides: need one entry per conv layer, got "
                     + ", ".join(f"{len(v)}" for v in lists.values()))
        if not self.channels:
            p.append("policy.channels: need at least one conv layer")
        for name, values in {**lists, "hidden_sizes": self.hidden_sizes}.items():
            if any(v < 1 for v in values):
                p.append(f"policy.{name}: every entry must be >= 1, got {values}")
        for name in ("image_features", "state_features"):
            if getattr(self, name) < 1:
                p.append(f"policy.{name}: must be >= 1, got {getattr(self, name)}")
        return p

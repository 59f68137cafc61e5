"""Configuration of the CNN policy: the Gaussian actor-critic over one image encoder (``policy.type: cnn``). Under SAC
the algorithm puts its tanh-squashed Gaussian on that encoder (``encoder_class``) with these hidden sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from embodied.policy.config import PolicyConfig


@dataclass
class CNNEncoderConfig(PolicyConfig):
    """The image (and state) encoder both CNN policies build (``embodied.policies.cnn.modeling.CNNFeatures``)."""

    channels: list[int] = field(default_factory=lambda: [32, 64, 64])  # output channels of each conv layer
    kernel_sizes: list[int] = field(default_factory=lambda: [8, 4, 3])  # square kernel of each conv layer
    strides: list[int] = field(default_factory=lambda: [4, 2, 1])  # stride of each conv layer
    # What the linear layer reads of the last conv's map: every cell (flatten), or each channel's expected image
    # coordinates under a softmax over its cells (spatial_softmax: Levine et al. 2016's keypoints, robomimic's pool)
    image_pooling: Literal["flatten", "spatial_softmax"] = "flatten"
    image_features: int = 256  # width of the linear layer after the convs (per camera)
    state_features: int = 64  # width of the two-layer state MLP (when the env gives states)
    use_wrist_images: bool = True  # also encode wrist_images (same encoder) when the env provides them

    encoder_class: ClassVar[str] = "embodied.policies.cnn.modeling:cnn_encoder"
    # A checkpoint whose encoder differs in one of these cannot be loaded by policy.init_from (said up front).
    architecture_fields: ClassVar[tuple[str, ...]] = ("channels", "kernel_sizes", "strides", "image_pooling",
                                                      "image_features", "state_features", "use_wrist_images")

    def required_observations(self) -> set[str]:
        return {"images"}

    def validate(self) -> list[str]:
        """Conv lists of one length, positive sizes."""
        p: list[str] = []
        lists = {"channels": self.channels, "kernel_sizes": self.kernel_sizes, "strides": self.strides}
        if len({len(v) for v in lists.values()}) != 1:
            p.append("policy.channels, policy.kernel_sizes, policy.strides: need one entry per conv layer, got "
                     + ", ".join(f"{len(v)}" for v in lists.values()))
        if not self.channels:
            p.append("policy.channels: need at least one conv layer")
        for name, values in lists.items():
            if any(v < 1 for v in values):
                p.append(f"policy.{name}: every entry must be >= 1, got {values}")
        for name in ("image_features", "state_features"):
            if getattr(self, name) < 1:
                p.append(f"policy.{name}: must be >= 1, got {getattr(self, name)}")
        return p


@dataclass
class CNNConfig(CNNEncoderConfig):
    """A Gaussian policy over a small CNN of the cameras (and the state), with a value head."""

    type: str = "cnn"  # registered policy name
    hidden_sizes: list[int] = field(default_factory=lambda: [256])  # widths of the actor and critic heads
    init_log_std: float = -0.5  # initial log standard deviation of every action dimension
    # After policy.init_from loads its weights, every action dimension's log std is set to this: a clone's Gaussian,
    # fitted by likelihood, is narrow (log std near -3), so PPO's first steps in its mean move the ratio far. null:
    # keep the checkpoint's.
    init_from_log_std: float | None = None

    model_class: ClassVar[str] = "embodied.policies.cnn.modeling:CNNPolicy"
    head_fields: ClassVar[tuple[str, ...]] = ("init_log_std", "init_from_log_std")
    # SAC's actor over this policy's encoder, before; its own default head was two layers
    aliases: ClassVar[dict[str, dict[str, Any]]] = {"cnn_sac": {"hidden_sizes": [256, 256]}}

    def head_sizes(self) -> list[int]:
        return list(self.hidden_sizes)

    def validate(self) -> list[str]:
        """The encoder's checks; positive head widths; init_from_log_std only with init_from."""
        p = super().validate()
        if any(v < 1 for v in self.hidden_sizes):
            p.append(f"policy.hidden_sizes: every entry must be >= 1, got {self.hidden_sizes}")
        if self.init_from_log_std is not None and not self.init_from:
            p.append("policy.init_from_log_std: resets the log std that policy.init_from loads, but no "
                     "policy.init_from is set; give the checkpoint, or set policy.init_log_std instead")
        return p

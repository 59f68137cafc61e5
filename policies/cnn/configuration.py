"""Configuration of the CNN policies: the Gaussian actor-critic for PPO (``policy.type: cnn``) and the
tanh-Gaussian actor SAC trains (``cnn`` under SAC, ``with_head("tanh_gaussian")``; ``cnn_sac`` an alias), over one
image encoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from embodied.policies.mlp.configuration import squashed_head_problems
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

    model_class: ClassVar[str] = "embodied.policies.cnn.modeling:CNNPolicy"
    head: ClassVar[str] = "gaussian"
    # Under SAC (a tanh_gaussian head): SquashedCNNConfig with these fields (hidden_sizes as set: [256] unless given)
    heads: ClassVar[dict[str, str]] = {"tanh_gaussian": "cnn_sac"}

    def validate(self) -> list[str]:
        """The encoder's checks; positive head widths."""
        p = super().validate()
        if any(v < 1 for v in self.hidden_sizes):
            p.append(f"policy.hidden_sizes: every entry must be >= 1, got {self.hidden_sizes}")
        return p


@dataclass
class SquashedCNNConfig(CNNEncoderConfig):
    """A tanh-squashed Gaussian over the CNN encoder, the policy SAC/RLPD train on images (DrQ's shape; the critics
    are SAC's, ``algorithm.critic_hidden_sizes``)."""

    type: str = "cnn_sac"  # registered policy name (an alias: policy.type=cnn under SAC builds this)
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of the actor's hidden layers
    log_std_min: float = -5.0  # the actor's log-std is squashed into [log_std_min, log_std_max] (CleanRL's bounds)
    log_std_max: float = 2.0  # upper bound of the actor's log-std

    model_class: ClassVar[str] = "embodied.policies.cnn.squashed:SquashedCNNPolicy"
    architecture_fields: ClassVar[tuple[str, ...]] = ("channels", "kernel_sizes", "strides", "image_pooling",
                                                      "image_features", "state_features", "use_wrist_images",
                                                      "hidden_sizes")
    head: ClassVar[str] = "tanh_gaussian"

    def validate(self) -> list[str]:
        """The encoder's checks; the actor's widths; log-std bounds in order."""
        return super().validate() + squashed_head_problems(self.hidden_sizes, self.log_std_min, self.log_std_max)

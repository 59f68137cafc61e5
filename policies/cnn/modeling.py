"""Gaussian CNN actor-critic that emits an action chunk from camera images (and states).

Encoder: a Nature-CNN-like stack of convolutions (by default 8x8/4, 4x4/2, 3x3/1 with 32, 64, 64
channels: about 3.4 M multiply-adds for a 64x64 image, cheap on a CPU) and a linear layer turn
``main_images`` uint8 [B, H, W, 3] into features (``image_pooling: spatial_softmax``: the linear layer reads
each last map's expected (x, y), ``SpatialSoftmax``, instead of every cell). ``wrist_images``, when the env
provides them (``PolicySpec.wrist_image_shape``) and ``use_wrist_images`` is on, go through the *same* encoder
(shared weights: half the parameters, and the convolutions see twice the images); their features
are concatenated after the main camera's, so the heads still know which view is which. States
[B, S], when present, go through a small two-layer MLP and are concatenated too.

Heads: the encoder is shared by actor and critic (the convolutions are most of the compute, and a
shared trunk is what PPO on pixels usually does, e.g. Nature-CNN PPO on Atari); each has its own
MLP over the features. The actor gives the mean of a diagonal Gaussian over the whole chunk
[B, C * A] with one state-independent learned log-std per chunk entry; a chunk's log-prob is the
sum over its C * A dimensions (``logprob_granularity = "chunk"``), exactly as the MLP policy.

Images stay uint8 until the forward pass: ``act`` puts the uint8 tensors in ``forward_inputs``
(a quarter of float32's size in trajectories and on the channels) and ``evaluate`` replays them;
the conversion to float in [0, 1] happens inside the encoder. Outputs of ``act`` and ``value``
are on the CPU whatever device the module sits on.

The encoders and the inputs they read are ``CNNObservations``, mixed into ``CNNPolicy`` and, as a module of
their own (``CNNFeatures``, ``cnn_encoder``), the encoder SAC's tanh-Gaussian actor sits on (``policy.type: cnn`` under
SAC, ``embodied.algorithms.sac_actor``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

from embodied.core import rng
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, Obs, PolicyOutput
from embodied.policies.cnn.configuration import CNNConfig, CNNEncoderConfig
from embodied.policy.base import Policy, PolicySpec


def _init(layer: nn.Module, gain: float = float(np.sqrt(2))) -> nn.Module:
    """Orthogonal weights, zero bias (as CleanRL); small gains on output layers."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(sizes: list[int], out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        layers.append(_init(nn.Linear(n_in, n_out), out_gain if last else float(np.sqrt(2))))
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class SpatialSoftmax(nn.Module):
    """[B, K, H, W] feature maps -> [B, 2K] keypoints: each channel's expected (x, y) in [-1, 1] under a softmax over
    its H * W cells, with one learned temperature (Levine et al. 2016; robomimic's ``SpatialSoftmax``).

    Why: a flattened map tells the heads *that* a feature fired somewhere, and they must learn where from thousands
    of weights; keypoints hand them the position itself, which is what reaching for a small target needs."""

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1.0, 1.0, height), torch.linspace(-1.0, 1.0, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1), persistent=False)
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(maps.flatten(2) / self.log_temperature.exp(), dim=-1)  # [B, K, H * W]
        return (weights @ self.grid).flatten(1)  # [B, K, 2] -> [B, 2K]


class ImageEncoder(nn.Module):
    """uint8 [B, H, W, 3] -> float32 [B, features]: convolutions, flatten or spatial softmax
    (``image_pooling``), linear, ReLU."""

    def __init__(self, config: CNNEncoderConfig, image_shape: tuple[int, ...]) -> None:
        super().__init__()
        if len(image_shape) != 3 or image_shape[2] != 3:
            raise ValueError(f"policy.type={config.type} expects images of shape (H, W, 3), the env gives "
                             f"{image_shape}")
        layers: list[nn.Module] = []
        in_channels = 3
        for out_channels, kernel, stride in zip(config.channels, config.kernel_sizes, config.strides):
            layers += [_init(nn.Conv2d(in_channels, out_channels, kernel, stride)), nn.ReLU()]
            in_channels = out_channels
        with torch.no_grad():  # the last map's shape: [1, channels, height, width]
            _, channels, height, width = nn.Sequential(*layers)(torch.zeros(1, 3, *image_shape[:2])).shape
        flat = channels * height * width
        if config.image_pooling == "spatial_softmax":
            layers.append(SpatialSoftmax(height, width))
            flat = 2 * channels  # one (x, y) per map
        self.convs = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(_init(nn.Linear(flat, config.image_features)), nn.ReLU())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0
        return self.linear(self.convs(x))


class CNNObservations:
    """What the CNN policies see, mixed into a module: the image encoder (``encoder``, shared by the main and wrist
    cameras) and the state MLP (``state_encoder``, when the env gives states), the forward inputs they read from an
    observation (uint8 images, float32 states) and the features [B, F] they make of them.

    ``CNNPolicy`` mixes it in directly (its parameters stay named ``encoder.*``); ``CNNFeatures`` is it as a module
    of its own, the feature encoder of ``policy.type: cnn`` under SAC.
    """

    policy_type: str  # named in errors
    encoder: ImageEncoder
    state_encoder: nn.Sequential

    def _build_encoders(self, config: CNNEncoderConfig, spec: PolicySpec) -> int:
        """Build the encoders for ``spec``'s observations; returns the width of the features."""
        if spec.image_shape is None:
            raise ValueError(f"policy.type={self.policy_type} needs image observations (env.obs_mode 'rgb' or "
                             "'state+rgb'); the env gives none")
        if len(config.channels) == 0 or not len(config.channels) == len(config.kernel_sizes) == len(config.strides):
            raise ValueError("policy.channels, policy.kernel_sizes and policy.strides need one entry per conv layer")
        self.image_shape = tuple(spec.image_shape)
        wrist_shape = spec.wrist_image_shape
        self.use_wrist = bool(config.use_wrist_images and wrist_shape is not None)
        if self.use_wrist and tuple(wrist_shape) != self.image_shape:
            raise ValueError(f"policy.type={self.policy_type} encodes wrist images with the main images' encoder, so "
                             f"they need the same shape; the env gives {tuple(wrist_shape)} and {self.image_shape} "
                             "(set policy.use_wrist_images=false)")
        try:
            self.encoder = ImageEncoder(config, self.image_shape)
        except RuntimeError as exc:  # the convolutions shrink the image below one pixel
            raise ValueError(f"policy.type={self.policy_type}: the conv layers do not fit {self.image_shape} images: "
                             f"{exc}") from None
        self.state_dim = spec.state_dim
        features = config.image_features * (2 if self.use_wrist else 1)
        if self.state_dim > 0:
            self.state_encoder = _mlp([self.state_dim, config.state_features, config.state_features], float(np.sqrt(2)))
            features += config.state_features
        return features

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The tensors the forward pass reads: uint8 images (copied), float32 states."""
        inputs = {MAIN_IMAGES: self._images(obs, MAIN_IMAGES)}
        if self.use_wrist:
            inputs[WRIST_IMAGES] = self._images(obs, WRIST_IMAGES)
        if self.state_dim > 0:
            if STATES not in obs:
                raise KeyError(f"policy.type={self.policy_type} was built for states but the observation has only "
                               f"{sorted(obs)}")
            inputs[STATES] = torch.from_numpy(np.array(np.asarray(obs[STATES]), dtype=np.float32))  # a copy, as images
        return inputs

    def _images(self, obs: Obs, key: str) -> torch.Tensor:
        if key not in obs:
            raise KeyError(f"policy.type={self.policy_type} was built for {key!r} but the observation has only "
                           f"{sorted(obs)}")
        # A copy: env buffers may be reused after this step (asarray first: replay batches are torch tensors).
        images = np.array(np.asarray(obs[key]), copy=True)
        if images.dtype != np.uint8 or images.shape[1:] != self.image_shape:
            raise ValueError(f"policy.type={self.policy_type} expects {key} uint8 [B, "
                             f"{', '.join(map(str, self.image_shape))}], got {images.dtype} {list(images.shape)}")
        return torch.from_numpy(images)

    def _features(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        device = self.encoder.linear[0].weight.device  # inputs arrive on the CPU; a no-op unless the module moved
        images = inputs[MAIN_IMAGES].to(device)
        if self.use_wrist:  # one encoder pass over both cameras
            images = torch.cat([images, inputs[WRIST_IMAGES].to(device)])
        encoded = self.encoder(images)
        parts = list(encoded.chunk(2)) if self.use_wrist else [encoded]
        if self.state_dim > 0:
            parts.append(self.state_encoder(inputs[STATES].to(device)))
        return torch.cat(parts, dim=-1)


class CNNFeatures(CNNObservations, nn.Module):
    """``CNNObservations`` as a module: forward inputs -> features [B, ``out_features``]
    (``embodied.policy.encoder.FeatureEncoder``)."""

    observes: tuple[str, ...] = ()  # no running statistics

    def __init__(self, config: CNNEncoderConfig, spec: PolicySpec, policy_type: str) -> None:
        super().__init__()
        self.policy_type = policy_type
        self.out_features = self._build_encoders(config, spec)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._features(inputs)

    def observe(self, inputs: dict[str, torch.Tensor]) -> None:
        """Nothing to merge: the encoder has no running statistics."""


def cnn_encoder(config: CNNEncoderConfig, spec: PolicySpec) -> CNNFeatures:
    """The CNN policy's observation encoder (``CNNEncoderConfig.encoder_class``), which an algorithm that puts its own
    head on the policy (SAC, DrQ's shape) builds."""
    return CNNFeatures(config, spec, config.type)


class CNNPolicy(CNNObservations, Policy):
    """Gaussian CNN policy over action chunks, with a value head on the same encoder."""

    logprob_granularity = "chunk"
    policy_type = "cnn"

    def __init__(self, config: CNNConfig, spec: PolicySpec) -> None:
        super().__init__()
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        features = self._build_encoders(config, spec)
        out = self.chunk * self.action_dim
        self.actor_mean = _mlp([features, *config.hidden_sizes, out], 0.01)
        self.critic = _mlp([features, *config.hidden_sizes, 1], 1.0)
        self.log_std = nn.Parameter(torch.full((out,), float(config.init_log_std)))
        self.init_from_log_std = config.init_from_log_std

    def after_init_from(self) -> None:
        """Set the loaded Gaussian's log std to policy.init_from_log_std, where given."""
        if self.init_from_log_std is not None:
            with torch.no_grad():
                self.log_std.fill_(self.init_from_log_std)

    # -- forward --------------------------------------------------------------------------------

    def _heads(self, inputs: dict[str, torch.Tensor]) -> tuple[Normal, torch.Tensor]:
        features = self._features(inputs)
        mean = self.actor_mean(features)
        return Normal(mean, self.log_std.exp().expand_as(mean)), self.critic(features).squeeze(-1)

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        inputs = self.forward_inputs(obs)
        dist, values = self._heads(inputs)
        flat = dist.mean if deterministic else rng.sample(dist)
        return PolicyOutput(
            actions=flat.view(-1, self.chunk, self.action_dim).cpu(),
            logprobs=dist.log_prob(flat).sum(-1).cpu(),
            values=values.cpu(),
            forward_inputs=inputs,  # on the CPU, images uint8
        )

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        """On the module's device (the actor moves its minibatches there)."""
        dist, values = self._heads(forward_inputs)
        flat = actions.reshape(actions.shape[0], -1).to(values.device)
        return dist.log_prob(flat).sum(-1), dist.entropy().sum(-1), values

    def value(self, obs: Obs) -> torch.Tensor:
        return self.critic(self._features(self.forward_inputs(obs))).squeeze(-1).cpu()

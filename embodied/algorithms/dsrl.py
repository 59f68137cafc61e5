"""DSRL, diffusion steering (Wagenmaker et al. 2025; ``algorithm.name: dsrl``): SAC over the *initial noise* of a
frozen flow-matching policy.

The flow policy (``policy``: ``type: vla`` with ``action_head: flow``, or ``type: pi0``; its weights from
``policy.init_from``, an SFT checkpoint) is never trained. A small tanh-Gaussian noise policy (SAC's actor,
``embodied.algorithms.sac_actor``, built here over the frozen policy's features) chooses the noise ``x_1`` its Euler loop
starts from, and the frozen policy turns that noise into the env's chunk with its deterministic ODE. SAC
(``embodied.algorithms.sac``: the same learner, replay, runner and actor worker) then treats the noise as its action:

    noise = tanh(u) * algorithm.noise_scale,   u ~ N(mu(f), sigma(f))      # [Cn, An], f: the obs's features
    chunk = frozen ODE from noise                                            # [C, A], what the env executes
    Q(f, noise) learns the chunk's discounted reward; the noise policy maximises it

So the critics score (features, noise), the noise policy's entropy is over the noise, and only it and the critics
train: weight sync sends the noise policy's tensors alone, checkpoints hold it, the critics and the learner. The
frozen policy is rebuilt on every copy from the config and ``policy.init_from`` (it is kept out of ``DSRLPolicy``'s
module tree), and runs in the rollout worker, which computes the features while acting.

**Features** (``algorithm.dsrl_features``): ``encoding`` (default), an encoding the frozen policy computes anyway
for the chunk (the flow VLA: its backbone's last prompt-token hidden state, what its value head reads; π0: the
masked mean of its VLM prefix plus the normalized state), which sees the images and the instruction, so it tells
PickColor's target cube apart where the state vector cannot; or ``states``, the env's state vector. Replay stores
the features of each obs and of the next obs (``final_obs`` after a done), recorded by the rollout worker
(``DSRLConfig.replay_record``, through ``DSRLPolicy.replay_record``), so a gradient update never runs the frozen policy.

**Noise shape**: the flow VLA's whole noise [C, A]. For π0 only the executed part [action_chunk, A] of its
[chunk_size, max_action_dim] noise is steered; the padded entries are 0 (``PI0Policy.steer`` says why).

    cfg = load_config("configs/pick_color_tinyvla_flow_dsrl.yaml", ["policy.init_from=runs/<flow sft run>"])
    train(cfg)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

from embodied.algorithms.sac import SACLearner
from embodied.algorithms.sac_actor import TanhGaussianActor
from embodied.algorithms.sac_config import TanhGaussianConfig
from embodied.checkpoint.store import load_init_from
from embodied.core import rng
from embodied.core.types import STATES, NoiseSteering, Obs, PolicyOutput, Trajectory
from embodied.policy.base import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.policy.encoder import StatesEncoder

FEATURES = "dsrl_features"  # forward_inputs and replay key: what the noise policy and critics see, float32 [B, F]
NOISE = "dsrl_noise"  # forward_inputs key: the initial noise the chunk was decoded from, float32 [B, Cn, An]
FROZEN_SEED = 0  # every copy builds the frozen policy under this seed: the same weights even without init_from


@runtime_checkable
class SteerablePolicy(Protocol):
    """What DSRL asks of the frozen policy (``PolicyConfig.flow_noise`` says a config builds one)."""

    def flow_noise_shape(self) -> tuple[int, int]:
        """The steered noise [Cn, An]."""

    def flow_feature_size(self) -> int:
        """F of ``steer(obs).features``."""

    def steer(self, obs: Obs) -> NoiseSteering:
        """The policy's prefix over ``obs`` once: its features and the ODE from a given noise to env actions."""


@dataclass
class DSRLPolicyConfig(PolicyConfig):
    """The policy a dsrl run's workers build (``DSRLConfig.worker_policy``), not a ``policy.type`` of its own: the frozen
    flow policy's config (``policy``, whose ``init_from`` gives its weights) and the noise policy's settings."""

    type: str = "dsrl"
    frozen: PolicyConfig | None = None  # the run's policy section
    noise_scale: float = 1.0  # algorithm.noise_scale
    features: str = "encoding"  # algorithm.dsrl_features
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # algorithm.noise_policy_hidden_sizes

    model_class: ClassVar[str] = "embodied.algorithms.dsrl:DSRLPolicy"


def build_frozen(config: PolicyConfig, spec: PolicySpec) -> Policy:
    """The frozen flow policy: built under ``FROZEN_SEED`` (so every copy holds the same weights), loaded from
    ``config.init_from`` when set, with every parameter frozen and in eval mode."""
    with rng.seeded(FROZEN_SEED):  # one thread at a time, the actor's stream untouched (embodied.core.rng)
        policy = build_policy(config, spec)
    if config.init_from:  # the driver checked its type, chunk and architecture already (check_init_from)
        load_init_from(policy, config.init_from, spec.action_dim)
    else:
        warnings.warn("algorithm.name=dsrl without policy.init_from: the frozen flow policy is its initialisation "
                      "(pretrained backbone, untrained heads, which copies in other processes need not share: a tiny "
                      "model built on first use draws its weights first); give it the SFT checkpoint to steer",
                      stacklevel=2)
    if not isinstance(policy, SteerablePolicy):
        raise ValueError(f"algorithm.name=dsrl: policy.type={config.type} ({type(policy).__name__}) cannot act from a "
                         "given noise (flow_noise_shape, flow_feature_size, steer)")
    return policy.requires_grad_(False).eval()


class RecordedFeatures(nn.Module):
    """Forward inputs -> the features recorded in them, float32 [B, F]: DSRL's feature encoder, with no parameters."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs[FEATURES].float()


class DSRLPolicy(Policy):
    """A tanh-Gaussian noise policy over a frozen flow policy; implements
    ``embodied.policy.q_functions.QFunctionPolicy``
    in noise space (module docstring). Its module tree, so its parameters, state dict, optimizer and weight sync,
    is the noise policy alone."""

    logprob_granularity = "chunk"

    def __init__(self, config: DSRLPolicyConfig, spec: PolicySpec) -> None:
        super().__init__()
        if config.frozen is None:
            raise ValueError("DSRLPolicyConfig.frozen: the flow policy to steer is missing")
        self.config = config
        frozen = build_frozen(config.frozen, spec)
        self._frozen = [frozen]  # a list keeps it out of the module tree: never trained, synced or checkpointed
        chunk, dim = frozen.flow_noise_shape()
        if config.features == "states":
            if spec.state_dim <= 0:
                raise ValueError("algorithm.dsrl_features=states: the env gives no states; set env.obs_mode to "
                                 "'state+rgb' or algorithm.dsrl_features=encoding")
            size = spec.state_dim
        else:
            size = frozen.flow_feature_size()
        noise_config = TanhGaussianConfig(type="dsrl_noise", action_chunk=chunk, hidden_sizes=list(config.hidden_sizes))
        s = config.noise_scale
        noise_space = PolicySpec(state_dim=size, image_shape=None, action_dim=dim, action_low=(-s,) * dim,
                                 action_high=(s,) * dim)  # SAC's actor scales its tanh into the bounds: tanh(u) * s
        # SAC's actor over the features as they are (no statistics merged): the noise policy
        self.noise_policy = TanhGaussianActor(noise_config, noise_space, encoder=StatesEncoder(size))
        # Before any update, greedy DSRL is the frozen policy's ODE from zero noise on every obs. An untrained mean
        # head instead picks an arbitrary noise per obs from features of any scale (π0's prefix means): with it,
        # greedy success before the first update measured 79.7 / 82.0 / 39.8% on seeds 0 / 1 / 2 of one checkpoint.
        self.noise_policy.start_at_center()  # type: ignore[attr-defined]
        self.recorded = RecordedFeatures()

    @property
    def frozen(self) -> Policy:
        return self._frozen[0]

    def describe(self) -> str:
        chunk, dim = self.frozen.flow_noise_shape()  # type: ignore[attr-defined]
        trainable = sum(p.numel() for p in self.parameters())
        return (f"policy: DSRL noise policy ({trainable / 1e6:.3f}M parameters, all trainable) over noise [{chunk}, "
                f"{dim}] x {self.config.noise_scale}, features: {self.config.features}; "
                f"frozen {self.frozen.describe()}")

    def _features(self, obs: Obs, steering: NoiseSteering | None = None) -> torch.Tensor:
        if self.config.features == "states":
            return torch.as_tensor(obs[STATES], dtype=torch.float32)
        return (steering or self.frozen.steer(obs)).features  # type: ignore[attr-defined]

    # -- QFunctionPolicy: the noise policy's ---------------------------------------------------------

    @property
    def feature_encoder(self) -> nn.Module:
        """The recorded features as they are: the frozen policy computed them while acting, so nothing here trains
        (the learner's stop-gradient and target copy of it are no-ops, as for a states encoder)."""
        return self.recorded

    def sample_with_logprob(self, features: torch.Tensor,
                            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.noise_policy.sample_with_logprob(features, generator)  # type: ignore[attr-defined]

    def mode_error(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.noise_policy.mode_error(features, actions)  # type: ignore[attr-defined]

    # -- Policy -----------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        """The noise policy's noise (greedy: ``tanh(mean) * noise_scale``), decoded by the frozen policy's ODE."""
        steering = self.frozen.steer(obs)  # type: ignore[attr-defined]
        features = self._features(obs, steering)
        out = self.noise_policy.act({STATES: features}, deterministic)
        noise = out.actions  # [B, Cn, An]
        return PolicyOutput(actions=steering.decode(noise), logprobs=out.logprobs, values=torch.zeros(len(features)),
                            forward_inputs={FEATURES: features, NOISE: noise})

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        """The noise policy's log-prob of the recorded noise (the executed ``actions`` are not read)."""
        return self.noise_policy.evaluate({STATES: forward_inputs[FEATURES]}, forward_inputs[NOISE])

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The features of ``obs``: computed by the frozen policy (or its states), or, for an observation as replay
        holds it (``replay_record``'s), the features recorded."""
        if FEATURES in obs:
            return {FEATURES: torch.as_tensor(obs[FEATURES]).float()}
        return {FEATURES: self._features(obs)}

    def value(self, obs: Obs) -> torch.Tensor:
        """0: SAC bootstraps with its critics, never with V (and a value would cost a pass of the frozen policy)."""
        return torch.zeros(len(next(iter(obs.values()))))

    def replay_record(self, obs: Obs, acted: PolicyOutput | None = None) -> dict[str, Any]:
        """Replay keeps the features: those ``act`` computed, or (final and last obs) computed now."""
        if acted is not None:
            return {FEATURES: acted.forward_inputs[FEATURES]}
        return {FEATURES: self._features(obs)}



class DSRLLearner(SACLearner):
    """SAC's learner over the noise policy (``DSRLConfig.algorithm_class``): its checkpoints and metrics are
    ``dsrl``'s."""

    name: ClassVar[str] = "dsrl"

    def replay_actions(self, trajectory: Trajectory) -> torch.Tensor:
        """The critics score the noise the chunk was decoded from (recorded by ``DSRLPolicy.act``), not the chunk."""
        return trajectory.forward_inputs[NOISE]

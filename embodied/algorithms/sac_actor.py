"""SAC's actor: a tanh-squashed Gaussian over action chunks, put by the algorithm on the policy's observation encoder.

The ``policy:`` section names the perception (``policy.type: mlp``: the states; ``cnn``: the CNN image encoder, DrQ's
shape); SAC builds that encoder (``PolicyConfig.encoder_class``, ``embodied.policy.encoder``) and this head over it
(``SACConfig.trained_policy`` -> ``TanhGaussianConfig``), so no policy carries a head or a twin type for SAC.

- ``SquashedGaussianPolicy``: an MLP trunk (the policy's ``head_sizes``, ReLU) over the features gives the mean and
  log-std of a diagonal Gaussian over the whole chunk [B, C * A]; a sample ``u`` is squashed by ``tanh`` and scaled
  into the env's action bounds. Its log-prob carries the change-of-variables correction of the squash and the
  scale. Greedy acting takes ``tanh(mean)``. It has no state-value head: ``value`` is 0 (SAC bootstraps with its
  critics, never with V).
- ``TanhGaussianActor``: that head over an encoder (``encoder``). The encoder is shared as DrQ and RLPD share
  theirs: rollouts act through it and weight sync sends it, but only the critics' loss trains it; the actor sees
  its features detached, and the TD target reads a polyak copy of it (``embodied.algorithms.sac.SACLearner``).

It implements ``embodied.policy.q_functions.QFunctionPolicy``: the critics are SAC's, built by the learner from the
actor's ``feature_size``, ``chunk`` and ``action_dim`` (``embodied.algorithms.sac_networks``).
"""

from __future__ import annotations

import abc
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal

from embodied.core import rng
from embodied.core.types import Obs, PolicyOutput
from embodied.algorithms.sac_config import TanhGaussianConfig
from embodied.policy.base import Policy, PolicySpec
from embodied.policy.encoder import FeatureEncoder, build_encoder


def squash_logprob_correction(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)`` elementwise, in the stable form ``2 (log 2 - u - softplus(-2u))``."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


SQUASH_MARGIN = 1e-3  # SFT's demonstrations on the bounds are pulled this far inside them (atanh(0.999) = 3.8)


class SquashedGaussianPolicy(Policy):
    """Tanh-Gaussian actor over action chunks on top of a subclass's ``feature_encoder``.

    A subclass builds its encoder, then calls ``_build_actor`` with the encoder's output width; it supplies
    ``feature_encoder`` and ``forward_inputs``.
    """

    logprob_granularity = "chunk"

    def _build_actor(self, features: int, hidden_sizes: list[int], log_std_bounds: tuple[float, float],
                     chunk: int, spec: PolicySpec) -> None:
        self.chunk, self.action_dim, self.log_std_bounds = chunk, spec.action_dim, log_std_bounds
        self.feature_size = features  # the encoder's width [B, F]: what SAC's critics read beside the chunk
        out = chunk * spec.action_dim
        self.trunk = _relu_trunk([features, *hidden_sizes])
        self.mean_head = nn.Linear(hidden_sizes[-1], out)
        self.log_std_head = nn.Linear(hidden_sizes[-1], out)
        low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)
        finite = np.isfinite(low) & np.isfinite(high)  # an unbounded dimension is squashed into [-1, 1]
        low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)
        # Buffers so they travel with the state dict; one entry per chunk entry [C * A].
        self.register_buffer("action_center", torch.as_tensor(np.tile((high + low) / 2, chunk)))
        self.register_buffer("action_half", torch.as_tensor(np.tile((high - low) / 2, chunk)))

    @property
    @abc.abstractmethod
    def feature_encoder(self) -> nn.Module:
        """Forward inputs -> features [B, F] (``QFunctionPolicy``): trained by the critics' loss only."""

    def _dist(self, features: torch.Tensor) -> Normal:
        h = self.trunk(features)
        return Normal(self.mean_head(h), self._log_std(h).exp())

    def _log_std(self, h: torch.Tensor) -> torch.Tensor:
        """The log-std head's output squashed into ``log_std_bounds`` (CleanRL's form)."""
        low, high = self.log_std_bounds
        return low + 0.5 * (high - low) * (torch.tanh(self.log_std_head(h)) + 1)

    def _logprob(self, dist: Normal, u: torch.Tensor) -> torch.Tensor:
        """log-prob of the scaled ``tanh(u)`` [B] (``u`` [B, C * A])."""
        return (dist.log_prob(u) - squash_logprob_correction(u) - self.action_half.log()).sum(-1)

    def _unit(self, actions: torch.Tensor) -> torch.Tensor:
        """Chunks [B, C, A] in the env's action box -> [B, C * A] in the box scaled to [-1, 1] (``_scale``'s inverse
        after the tanh)."""
        return (actions.reshape(actions.shape[0], -1) - self.action_center) / self.action_half

    def _scale(self, u: torch.Tensor) -> torch.Tensor:
        return (self.action_center + self.action_half * torch.tanh(u)).view(-1, self.chunk, self.action_dim)

    def sample_with_logprob(self, features: torch.Tensor,
                            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised chunk [B, C, A] and its log-prob [B] (``QFunctionPolicy``)."""
        dist = self._dist(features)
        noise = torch.randn(dist.mean.shape, generator=generator, dtype=dist.mean.dtype)
        u = dist.mean + dist.stddev * noise  # reparameterised, from the learner's generator (exact resume)
        return self._scale(u), self._logprob(dist, u)

    def greedy(self, features: torch.Tensor) -> torch.Tensor:
        """The greedy chunk [B, C, A] (the squashed mean), differentiable with respect to the policy: a deterministic
        actor's action (TD3's)."""
        return self._scale(self.mean_head(self.trunk(features)))

    def start_at_center(self) -> None:
        """Zero the mean head: until trained, the greedy chunk is the action box's centre for every input, and
        sampled chunks spread around it by the log-std head alone."""
        nn.init.zeros_(self.mean_head.weight)
        nn.init.zeros_(self.mean_head.bias)

    def mode_error(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[B]: the squared error between the greedy chunk (the squashed mean) and ``actions`` [B, C, A], both in
        the action box scaled to [-1, 1], summed over the chunk (TD3+BC's behaviour-cloning term; gradients reach
        the trunk and the mean head)."""
        mean = self.mean_head(self.trunk(features))
        target = self._unit(actions)
        return (torch.tanh(mean) - target).pow(2).sum(-1)

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        inputs = self.forward_inputs(obs)
        dist = self._dist(self.feature_encoder(inputs))
        u = dist.mean if deterministic else rng.sample(dist)
        return PolicyOutput(actions=self._scale(u), logprobs=self._logprob(dist, u), values=torch.zeros(len(u)),
                            forward_inputs=inputs)

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        """Log-prob of ``actions`` (inverting the squash), its negation as a one-sample entropy estimate, and 0s."""
        dist = self._dist(self.feature_encoder(forward_inputs))
        y = self._unit(actions).clamp(-1 + 1e-6, 1 - 1e-6)
        logprob = self._logprob(dist, torch.atanh(y))
        return logprob, -logprob, torch.zeros(len(logprob))

    def value(self, obs: Obs) -> torch.Tensor:
        return torch.zeros(len(next(iter(obs.values()))))  # every obs entry is batched [B, ...] (strings a list)

    def supervised_loss(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor,
                        executed: torch.Tensor) -> torch.Tensor:
        """Behaviour cloning of the mode and of the spread around it, averaged over executed sub-steps:

        - the squared error between the squashed mean ``tanh(mu)`` and the demonstrated actions (both in the action
          box scaled to [-1, 1]), summed over each sub-step's dimensions. Not the likelihood: scripted and
          teleoperated demonstrations sit on the bounds (a closed gripper is -1 or 1), where ``atanh`` is infinite
          and the tanh-Gaussian's log-prob is dominated by its change-of-variables term; on PickPlace's
          demonstrations the likelihood cloned to 0-4% greedy success, this to 66-77%;
        - the Gaussian negative log-likelihood, in the pre-squash space, of the demonstrations (pulled
          ``SQUASH_MARGIN`` inside the bounds) around the mean held fixed, which trains the log-std head alone (on
          features it does not pass gradients back through), so the actor's own samples spread as the
          demonstrations do around what it learned rather than by the head's initial width."""
        h = self.trunk(self.feature_encoder(forward_inputs))
        mean = self.mean_head(h)
        log_std = self._log_std(h.detach())
        target = self._unit(actions)
        pre = torch.atanh(target.clamp(-1 + SQUASH_MARGIN, 1 - SQUASH_MARGIN))
        nll = Normal(mean.detach(), log_std.exp()).log_prob(pre).neg()
        error = (torch.tanh(mean) - target).pow(2) + nll
        weight = executed.float()
        return (error.view(*executed.shape, -1).sum(-1) * weight).sum() / weight.sum().clamp_min(1.0)


def _relu_trunk(sizes: list[int]) -> nn.Sequential:
    """Linear + ReLU layers of ``sizes``, orthogonal init with gain sqrt(2) and zero biases (CleanRL's)."""
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        linear = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(linear.weight, np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers)


class TanhGaussianActor(SquashedGaussianPolicy):
    """SAC's tanh-Gaussian head over the policy's observation encoder (``TanhGaussianConfig``); implements
    ``embodied.policy.q_functions.QFunctionPolicy``."""

    def __init__(self, config: TanhGaussianConfig, spec: PolicySpec,
                 encoder: FeatureEncoder | None = None) -> None:
        super().__init__()
        if config.encoder is None and encoder is None:
            raise ValueError("TanhGaussianConfig.encoder: the policy whose encoder the head reads is missing")
        self.config = config
        self.encoder = encoder if encoder is not None else build_encoder(config.encoder, spec)
        self.observes = tuple(self.encoder.observes)  # what the actor's ``observe`` merges
        self._build_actor(self.encoder.out_features, config.hidden_sizes, (config.log_std_min, config.log_std_max),
                          config.action_chunk, spec)

    @property
    def feature_encoder(self) -> nn.Module:
        return self.encoder  # type: ignore[return-value]

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return self.encoder.forward_inputs(obs)

    @torch.no_grad()
    def observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """The encoder's running statistics (the states', with ``policy.normalize_states``, unless frozen)."""
        self.encoder.observe(forward_inputs)

    def describe(self) -> str:
        return f"{super().describe()} (tanh-Gaussian head over policy.type={self.config.encoder_type}'s encoder)"

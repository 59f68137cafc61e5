"""Log-probabilities of a flow-matching policy's Euler chain, for PPO and GRPO (πRL, arXiv 2510.25889).

One implementation with two users: our flow head (``policies/vla/flow.py``) and π0
(``policies/pi0/``). A user supplies ``velocity(x, t, repeats) -> (v, features)``: the velocity
``[M, C, A]`` of noisy chunks ``x`` at times ``t`` [M] over its cached prefix, where row ``i`` of the
cached batch is repeated ``repeats`` times in a row (``M = B * repeats``), plus the features the
Flow-Noise std head reads.

**Sampling.** ``K`` Euler steps from ``t = 1`` (noise) to ``0`` (action) with ``δ = 1 / K`` (π0's
convention: ``x_t = t * noise + (1 - t) * action``). From the velocity ``v`` at ``x_t``:
``x0 = x_t - t v`` and ``x1 = x_t + (1 - t) v``; the next sample is ``N(mean, std²)`` with
``mean = x0 (1 - t + δ) + x1 w1``, where

- the ODE (greedy eval, and the deterministic steps of ``sde``) has ``w1 = t - δ`` and ``std = 0``:
  exactly ``x_t - δ v``;
- ``sde`` (Flow-SDE, from Flow-GRPO): one step per chunk, drawn at random, has
  ``w1 = t - δ - σ² δ / (2t)`` and ``std = σ √δ`` with ``σ_t = a √(t / (1 - t))`` (``a`` =
  ``flow_noise_level``; at ``t = 1`` the denominator is ``δ``, as in RLinf);
- ``noise`` (Flow-Noise): every step has ``w1 = t - δ`` and ``std`` from a learned head on the
  features, squashed into ``[std_min, std_max]``.

**Scored entries.** ``scored`` (bool ``[C, A]``) marks the chunk entries the env executes. Only they
draw noise and count in the log-prob: the others (π0's padded action dimensions, and the chunk
positions past the executed ones) follow the ODE, so the chain holds no randomness that is not
scored. Log-probs are per chunk position ``[B, C]``, summed over the action dimensions and the
noisy steps (the start ``N(0, I)`` does not depend on the weights, so it is left out).

Everything a replay needs is recorded: the chain of samples ``x_1 ... x_0`` (``flow_chain``
``[B, K + 1, C, A]``) and, for ``sde``, the stochastic step (``flow_step`` [B]). :func:`score_chain`
scores all recorded steps in one batched velocity call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from embodied.core import rng
from embodied.policies.transformers_base.configuration import FLOW_LOGPROBS

CHAIN = "flow_chain"  # forward_inputs key: the samples x_1 (noise) ... x_0 (action), [B, K + 1, C, A]
STEP = "flow_step"  # forward_inputs key: the stochastic step of Flow-SDE, int64 [B]
LOG_2PI = math.log(2 * math.pi)

# velocity(x [M, C, A], t [M], repeats) -> (velocity [M, C, A], features [M, C, W]); M = B * repeats
Velocity = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


class FlowLogprob:
    """How a denoising step is made stochastic and scored: one strategy per ``flow_logprob``.

    ``noisy_steps`` says which of the ``K`` steps draw noise for each row; ``step_std`` gives the
    std of the next sample and the weight of ``x1`` in its mean at a step.
    """

    name: ClassVar[str] = ""

    def noisy_steps(self, batch: int, steps: int, device: torch.device) -> torch.Tensor:
        """Bool [B, K]: the steps that draw noise (the others follow the ODE)."""
        raise NotImplementedError

    def step_std(self, t: torch.Tensor, delta: float, features: torch.Tensor,
                 action_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(std [B, C, A], x1 weight [B, 1, 1]) of a noisy step from ``t`` [B] to ``t - delta``."""
        raise NotImplementedError

    def record(self, noisy: torch.Tensor) -> dict[str, torch.Tensor]:
        """What ``forward_inputs`` keep of ``noisy_steps`` beyond the chain."""
        return {}

    def replayed_steps(self, inputs: dict[str, torch.Tensor], batch: int, steps: int,
                       device: torch.device) -> torch.Tensor:
        """Long [B, S]: the steps a replay scores for each row (the noisy ones of the sampling)."""
        raise NotImplementedError


class FlowSDE(FlowLogprob):
    """Flow-SDE: one step per chunk, drawn uniformly, is the SDE step with ``σ_t = a √(t / (1 - t))``."""

    name = "sde"

    def __init__(self, noise_level: float) -> None:
        self.noise_level = noise_level

    def noisy_steps(self, batch, steps, device):
        chosen = rng.randint(steps, (batch,), device)
        return F.one_hot(chosen, steps).bool()

    def step_std(self, t, delta, features, action_dim):
        denominator = torch.where(t >= 1.0, torch.full_like(t, delta), 1.0 - t)
        sigma = (self.noise_level * torch.sqrt(t / denominator))[:, None, None]
        t3 = t[:, None, None]
        std = (math.sqrt(delta) * sigma).expand(*features.shape[:2], action_dim)
        return std, t3 - delta - sigma ** 2 * delta / (2 * t3)

    def record(self, noisy):
        return {STEP: noisy.float().argmax(-1)}

    def replayed_steps(self, inputs, batch, steps, device):
        if STEP not in inputs:
            raise ValueError(f"policy.flow_logprob=sde: forward_inputs have no {STEP!r} (not from act with sampling)")
        return inputs[STEP].to(device).long()[:, None]


class FlowNoise(FlowLogprob):
    """Flow-Noise: every step adds Gaussian noise of a learned std in ``[low, high]``."""

    name = "noise"

    def __init__(self, std_head: nn.Linear, low: float, high: float) -> None:
        self.std_head, self.low, self.high = std_head, low, high

    def noisy_steps(self, batch, steps, device):
        return torch.ones(batch, steps, dtype=torch.bool, device=device)

    def step_std(self, t, delta, features, action_dim):
        std = self.low + (self.high - self.low) * torch.sigmoid(self.std_head(features.float()))
        return std[..., :action_dim], (t - delta)[:, None, None]

    def replayed_steps(self, inputs, batch, steps, device):
        return torch.arange(steps, device=device).expand(batch, steps)


def make_flow_logprob(name: str, noise_level: float, std_head: nn.Linear | None,
                      std_range: tuple[float, float]) -> FlowLogprob:
    """The strategy ``policy.flow_logprob`` names (``noise`` needs the policy's std head)."""
    if name == "sde":
        return FlowSDE(noise_level)
    if name == "noise":
        if std_head is None:
            raise ValueError("policy.flow_logprob=noise needs a std head on the expert's features")
        return FlowNoise(std_head, *std_range)
    raise ValueError(f"policy.flow_logprob: unknown mode {name!r}; known: {', '.join(FLOW_LOGPROBS)}")


def euler_times(steps: int, device: torch.device) -> torch.Tensor:
    """``t_0 = 1 > t_1 > ... > t_K = 0``, evenly spaced."""
    return torch.linspace(1.0, 0.0, steps + 1, device=device)


def step_distribution(strategy: FlowLogprob, x: torch.Tensor, v: torch.Tensor, features: torch.Tensor,
                      t: torch.Tensor, delta: float, noisy: torch.Tensor | None,
                      scored: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std [B, C, A] of the next sample from ``x`` at ``t`` [B] given its velocity ``v``.

    Rows where ``noisy`` [B] is False (all rows when it is None) follow the ODE with std 0; so do the
    entries ``scored`` [C, A] leaves out.
    """
    t3 = t[:, None, None]
    x0, x1 = x - t3 * v, x + (1.0 - t3) * v
    ode_mean = x0 * (1.0 - t3 + delta) + x1 * (t3 - delta)
    if noisy is None:
        return ode_mean, torch.zeros_like(x)
    std, w1 = strategy.step_std(t, delta, features, x.shape[-1])
    on = noisy[:, None, None]
    if scored is not None:
        on = on & scored
    mean = torch.where(on, x0 * (1.0 - t3 + delta) + x1 * w1, ode_mean)
    return mean, torch.where(on, std, torch.zeros_like(std))


def gaussian_logp(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per chunk position [B, C]: the log-density of ``x`` summed over the entries with std > 0."""
    on = std > 0
    safe = std.clamp_min(1e-12)
    logp = -0.5 * ((x - mean) / safe) ** 2 - safe.log() - 0.5 * LOG_2PI
    return torch.where(on, logp, torch.zeros_like(logp)).sum(-1)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Per chunk position [B, C]: the entropy summed over the entries with std > 0."""
    h = 0.5 + 0.5 * LOG_2PI + std.clamp_min(1e-12).log()
    return torch.where(std > 0, h, torch.zeros_like(h)).sum(-1)


@dataclass
class Chain:
    """What sampling a chunk returns: the action (``x_0``), its log-prob and entropy, what to record."""

    actions: torch.Tensor  # [B, C, A], the last sample
    logprobs: torch.Tensor  # [B, C]
    entropy: torch.Tensor  # [B, C]
    record: dict[str, torch.Tensor] = field(default_factory=dict)  # flow_chain (+ flow_step)


def sample_chain(velocity: Velocity, noise: torch.Tensor, steps: int, strategy: FlowLogprob,
                 deterministic: bool, scored: torch.Tensor | None = None) -> Chain:
    """Run ``steps`` Euler steps from ``noise`` [B, C, A]: the ODE when ``deterministic``, else the
    strategy's stochastic steps, recording the chain."""
    batch, device = noise.shape[0], noise.device
    times, delta = euler_times(steps, device), 1.0 / steps
    noisy = None if deterministic else strategy.noisy_steps(batch, steps, device)
    x, chain = noise, [noise]
    logp = torch.zeros(batch, noise.shape[1], device=device)
    entropy = torch.zeros_like(logp)
    for k in range(steps):
        t = times[k].expand(batch)
        v, features = velocity(x, t, 1)
        mean, std = step_distribution(strategy, x, v.float(), features, t, delta,
                                      None if noisy is None else noisy[:, k], scored)
        if noisy is None:
            x = mean
        else:
            x = mean + std * rng.randn_like(mean)
            logp = logp + gaussian_logp(x, mean, std)
            entropy = entropy + gaussian_entropy(std)
        chain.append(x)
    record = {CHAIN: torch.stack(chain, 1)}
    if noisy is not None:
        record |= strategy.record(noisy)
    return Chain(x, logp, entropy, record)


def score_chain(velocity: Velocity, inputs: dict[str, torch.Tensor], steps: int, strategy: FlowLogprob,
                scored: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [B, C], entropy [B, C]) of a recorded chain, every scored step in one velocity call."""
    if CHAIN not in inputs:
        raise ValueError(f"forward_inputs have no {CHAIN!r}: only chunks sampled by act can be scored "
                         "(supervised learning uses the flow-matching loss)")
    chain = inputs[CHAIN].float()
    device = chain.device
    batch = chain.shape[0]
    if chain.shape[1] != steps + 1:
        raise ValueError(f"policy.flow_steps: the recorded chain has {chain.shape[1] - 1} Euler steps, the policy "
                         f"takes {steps}; replay with the flow_steps the chunks were sampled with")
    picked = strategy.replayed_steps(inputs, batch, steps, device)  # [B, S]
    n = picked.shape[1]
    flat = picked.reshape(-1)  # row b's scored steps at b * n ... b * n + n - 1
    rows = torch.arange(batch, device=device).repeat_interleave(n)
    x, target = chain[rows, flat], chain[rows, flat + 1]
    t = euler_times(steps, device)[flat]
    v, features = velocity(x, t, n)
    mean, std = step_distribution(strategy, x, v.float(), features, t, 1.0 / steps,
                                  torch.ones_like(flat, dtype=torch.bool), scored)
    logp = gaussian_logp(target, mean, std).view(batch, n, -1).sum(1)
    entropy = gaussian_entropy(std).view(batch, n, -1).sum(1)
    return logp, entropy

"""The flow-matching action head (``policy.action_head: flow``), π0 / SmolVLA style, with the
log-probabilities that PPO and GRPO need (πRL, arXiv 2510.25889).

**The expert.** A small transformer over the ``C`` noisy action tokens of a chunk predicts the
velocity of the flow ``x_t = t * noise + (1 - t) * action`` (π0's convention: ``t = 1`` is noise,
``t = 0`` the action, target ``noise - action``). Each token's input is an MLP of its noisy action
and the sinusoidal embedding of ``t`` (π0's ``action_time_mlp``) plus a learned position. Each of
the ``flow_depth`` layers runs bidirectional self-attention among the action tokens, then
**cross-attention to the backbone's prefix**, then an MLP.

Why cross-attention (SmolVLA) and not π0's shared attention: shared attention runs the expert
inside every backbone layer, which ties the expert's depth to the backbone's and needs a hook into
each family's attention code (SmolVLM, Qwen2.5-VL and PaliGemma each implement theirs). Cross-
attention reads hidden states the backbone already returns (``output_hidden_states``), so one
expert of any width and depth works on every family, and the prefix is computed once per ``act``:
its keys and values are projected once per expert layer (:meth:`FlowExpert.encode_prefix`, the
cache) and reused by all ``flow_steps`` Euler steps. Expert layer ``i`` of ``D`` attends to backbone
layer ``round((i + 1) * N / D)`` of ``N``, so the first expert layers see earlier visual features,
as SmolVLA's expert reads the VLM's layers in step.

**Sampling.** ``flow_steps`` (``K``) Euler steps from ``t = 1`` to ``0`` with ``δ = 1 / K``. From the
velocity ``v`` at ``x_t``: ``x0 = x_t - t v`` and ``x1 = x_t + (1 - t) v``; the next sample is
``N(mean, std²)`` with ``mean = x0 (1 - t + δ) + x1 w1``, where

- the ODE (greedy eval, and the deterministic steps of ``sde``) has ``w1 = t - δ`` and ``std = 0``:
  exactly ``x_t - δ v``;
- ``sde`` (Flow-SDE, from Flow-GRPO): at one step per chunk, drawn at random, ``w1 = t - δ - σ² δ / (2t)``
  and ``std = σ √δ`` with ``σ_t = a √(t / (1 - t))`` (``a`` = ``flow_noise_level``; at ``t = 1`` the
  denominator is ``δ``, as in RLinf). The chunk's log-prob is that step's Gaussian.
- ``noise`` (Flow-Noise): every step has ``w1 = t - δ`` and ``std`` from a learned head on the expert's
  output, squashed into ``[flow_noise_std_min, flow_noise_std_max]``. The log-prob is the sum of the
  ``K`` step Gaussians (the start ``N(0, I)`` is left out: it does not depend on the weights, so no
  ratio or gradient changes).

Everything ``evaluate`` needs to replay ``act`` is recorded in ``forward_inputs``: the whole chain of
samples ``x_1 ... x_0`` (``flow_chain`` [B, K + 1, C, A], the initial noise first) and the
stochastic step (``flow_step`` [B], ``sde`` only). Log-probs are per action (``[B, C]``, summed over
the action dimensions and, for ``noise``, the steps), so the actor masks actions past an episode's
end as for the other continuous head.

**SFT** is the flow-matching loss: ``t ~ Beta(1.5, 1) * 0.999 + 0.001`` (π0), the squared error of
the velocity against ``noise - action`` per action entry, masked past the episode end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Beta

from embodied.policies.vla.heads import ActionHead, Backbone, HeadOutput, Prefix

CHAIN = "flow_chain"  # forward_inputs key: the samples x_1 (noise) ... x_0 (action), [B, K + 1, C, A]
STEP = "flow_step"  # forward_inputs key: the stochastic step of Flow-SDE, int64 [B]
LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class ExpertShape:
    """Width, depth and attention heads of the action expert (``policy.flow_width/depth/heads``)."""

    width: int
    depth: int
    heads: int


def time_embedding(t: torch.Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> torch.Tensor:
    """Sine-cosine embedding ``[..., dim]`` of times in [0, 1] (π0's periods, so fine steps of t differ)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, device=t.device, dtype=torch.float32)
    period = min_period * (max_period / min_period) ** fraction
    angle = t.float()[..., None] * (2 * math.pi / period)
    return torch.cat([angle.sin(), angle.cos()], -1)


class _Attention(nn.Module):
    """Multi-head attention; keys and values may come precomputed (the prefix cache)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        return x.view(b, n, self.heads, w // self.heads).transpose(1, 2)  # [B, heads, n, w / heads]

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv(x).chunk(2, -1)
        return self.split(k), self.split(v)

    def forward(self, x: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None = None) -> torch.Tensor:
        y = F.scaled_dot_product_attention(self.split(self.q(x)), *kv, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(x.shape))


class _Layer(nn.Module):
    """Pre-norm: self-attention among action tokens, cross-attention to the prefix, MLP."""

    def __init__(self, width: int, heads: int, prefix_width: int) -> None:
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.self_attn, self.cross_attn = _Attention(width, heads), _Attention(width, heads)
        self.prefix_in = nn.Sequential(nn.LayerNorm(prefix_width), nn.Linear(prefix_width, width))
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def encode_prefix(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cross_attn.keys_values(self.prefix_in(hidden.float()))

    def forward(self, x: torch.Tensor, prefix_kv: tuple[torch.Tensor, torch.Tensor],
                prefix_mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.self_attn(h, self.self_attn.keys_values(h))
        x = x + self.cross_attn(self.norm2(x), prefix_kv, prefix_mask)
        return x + self.mlp(self.norm3(x))


@dataclass
class PrefixCache:
    """Per expert layer, the prefix's keys and values, and the attention mask over the prefix."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor  # bool [B, 1, 1, L]: True where a prefix token may be attended

    def repeat(self, n: int) -> PrefixCache:
        """The cache for ``n`` copies of the batch (row ``i`` of the copy ``j`` at ``j * B + i``)."""
        if n == 1:
            return self
        return PrefixCache([(k.repeat(n, 1, 1, 1), v.repeat(n, 1, 1, 1)) for k, v in self.kv],
                           self.mask.repeat(n, 1, 1, 1))


class FlowExpert(nn.Module):
    """The action expert: velocity ``[B, C, A]`` (and expert features) of noisy chunks at times ``t``."""

    def __init__(self, chunk: int, action_dim: int, prefix_width: int, shape: ExpertShape) -> None:
        super().__init__()
        w = shape.width
        self.action_in = nn.Linear(action_dim, w)
        self.time_mlp = nn.Sequential(nn.Linear(2 * w, w), nn.SiLU(), nn.Linear(w, w))  # π0's action_time_mlp
        self.position = nn.Parameter(torch.randn(chunk, w) * 0.02)
        self.layers = nn.ModuleList(_Layer(w, shape.heads, prefix_width) for _ in range(shape.depth))
        self.norm = nn.LayerNorm(w)
        self.velocity = nn.Linear(w, action_dim)

    def prefix_layers(self, n_backbone_layers: int) -> list[int]:
        """Which ``hidden_states`` entry (0: embeddings, N: last layer) each expert layer attends to."""
        depth = len(self.layers)
        return [max(1, round((i + 1) * n_backbone_layers / depth)) for i in range(depth)]

    def encode_prefix(self, prefix: Prefix) -> PrefixCache:
        """Project the prefix into every layer's keys and values once (reused by all Euler steps)."""
        n = len(prefix.hidden) - 1
        kv = [layer.encode_prefix(prefix.hidden[i]) for layer, i in zip(self.layers, self.prefix_layers(n))]
        return PrefixCache(kv, prefix.mask.bool()[:, None, None, :])

    def forward(self, x: torch.Tensor, t: torch.Tensor, cache: PrefixCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocity and final features ``[B, C, width]`` of chunks ``x`` [B, C, A] at times ``t`` [B]."""
        a = self.action_in(x.float())
        tau = time_embedding(t, a.shape[-1])[:, None].expand_as(a)
        h = self.time_mlp(torch.cat([a, tau], -1)) + self.position
        for layer, kv in zip(self.layers, cache.kv):
            h = layer(h, kv, cache.mask)
        h = self.norm(h)
        return self.velocity(h), h


class FlowLogprob:
    """How a denoising step is made stochastic and scored: one strategy per ``policy.flow_logprob``.

    ``noisy_steps`` says which of the ``K`` steps draw noise for each row; ``step_std`` gives the
    std of the next sample and the weight of ``x1`` in its mean at a step.
    """

    name: ClassVar[str] = ""

    def noisy_steps(self, batch: int, steps: int, device: torch.device) -> torch.Tensor:
        """Bool [B, K]: the steps that draw noise (the others follow the ODE)."""
        raise NotImplementedError

    def step_std(self, t: torch.Tensor, delta: float, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(std [B, C, A], x1 weight [B, 1, 1]) of a noisy step from ``t`` [B] to ``t - delta``."""
        raise NotImplementedError

    def record(self, noisy: torch.Tensor) -> dict[str, torch.Tensor]:
        """What ``forward_inputs`` keep of ``noisy_steps`` beyond the chain."""
        return {}

    def replayed_steps(self, inputs: dict[str, torch.Tensor], batch: int, steps: int,
                       device: torch.device) -> torch.Tensor:
        """Long [B, S]: the steps ``evaluate`` scores for each row (the noisy ones of ``act``)."""
        raise NotImplementedError


class FlowSDE(FlowLogprob):
    """Flow-SDE: one step per chunk, drawn uniformly, is the SDE step with ``σ_t = a √(t / (1 - t))``."""

    name = "sde"

    def __init__(self, noise_level: float) -> None:
        self.noise_level = noise_level

    def noisy_steps(self, batch, steps, device):
        chosen = torch.randint(0, steps, (batch,), device=device)
        return F.one_hot(chosen, steps).bool()

    def step_std(self, t, delta, features):
        denominator = torch.where(t >= 1.0, torch.full_like(t, delta), 1.0 - t)
        sigma = (self.noise_level * torch.sqrt(t / denominator))[:, None, None]
        t3 = t[:, None, None]
        return (math.sqrt(delta) * sigma).expand(*features.shape[:2], -1), t3 - delta - sigma ** 2 * delta / (2 * t3)

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

    def step_std(self, t, delta, features):
        std = self.low + (self.high - self.low) * torch.sigmoid(self.std_head(features))
        return std, (t - delta)[:, None, None]

    def replayed_steps(self, inputs, batch, steps, device):
        return torch.arange(steps, device=device).expand(batch, steps)


class FlowHead(ActionHead):
    """Action chunks from a flow-matching expert over the cached backbone prefix (module docstring)."""

    granularity = "action"
    continuous = True

    def __init__(self, chunk: int, action_dim: int, placeholder_id: int, prefix_width: int, shape: ExpertShape,
                 steps: int, logprob: str, noise_level: float, noise_std: tuple[float, float]) -> None:
        super().__init__(chunk, action_dim, placeholder_id)
        self.expert = FlowExpert(chunk, action_dim, prefix_width, shape)
        self.steps = steps
        self.logprob: FlowLogprob
        if logprob == "sde":
            self.logprob = FlowSDE(noise_level)
        elif logprob == "noise":
            self.noise_std = nn.Linear(shape.width, action_dim)  # only Flow-Noise has (and trains) it
            self.logprob = FlowNoise(self.noise_std, *noise_std)
        else:
            raise ValueError(f"policy.flow_logprob: unknown mode {logprob!r}; known: sde, noise")

    def describe(self) -> str:
        e = self.expert
        return (f" (flow expert: width {e.velocity.in_features}, depth {len(e.layers)}, "
                f"{e.layers[0].self_attn.heads} heads, {self.steps} Euler steps, log-probs {self.logprob.name})")

    def _times(self, device: torch.device) -> torch.Tensor:
        return torch.linspace(1.0, 0.0, self.steps + 1, device=device)

    def _step(self, x: torch.Tensor, t: torch.Tensor, cache: PrefixCache,
              noisy: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std [B, C, A] of the next sample from ``x`` at ``t`` [B]; rows where ``noisy`` is
        False (or all rows, when it is None) follow the ODE, with std 0."""
        delta = 1.0 / self.steps
        v, features = self.expert(x, t, cache)
        t3 = t[:, None, None]
        x0, x1 = x - t3 * v, x + (1.0 - t3) * v
        if noisy is None:
            return x0 * (1.0 - t3 + delta) + x1 * (t3 - delta), torch.zeros_like(x)
        std, w1 = self.logprob.step_std(t, delta, features)
        w1 = torch.where(noisy[:, None, None], w1, t3 - delta)
        std = torch.where(noisy[:, None, None], std, torch.zeros_like(std))
        return x0 * (1.0 - t3 + delta) + x1 * w1, std

    def act(self, backbone: Backbone, batch: int, device: torch.device, deterministic: bool) -> HeadOutput:
        prefix = backbone.prefix()
        cache = self.expert.encode_prefix(prefix)
        x = torch.randn(batch, self.chunk, self.action_dim, device=device)
        times = self._times(device)
        noisy = None if deterministic else self.logprob.noisy_steps(batch, self.steps, device)
        chain = [x]
        logp = torch.zeros(batch, self.chunk, device=device)
        entropy = torch.zeros(batch, self.chunk, device=device)
        for k in range(self.steps):
            mean, std = self._step(x, times[k].expand(batch), cache, None if noisy is None else noisy[:, k])
            if noisy is not None:
                x = mean + std * torch.randn_like(mean)
                on = noisy[:, k, None]
                logp = logp + torch.where(on, _gaussian_logp(x, mean, std), 0.0)
                entropy = entropy + torch.where(on, _gaussian_entropy(std), 0.0)
            else:
                x = mean
            chain.append(x)
        record = {CHAIN: torch.stack(chain, 1)}
        if noisy is not None:
            record |= self.logprob.record(noisy)
        return HeadOutput(x, logp, entropy, prefix.hidden[-1][:, -1], record)

    def evaluate(self, backbone: Backbone, actions: torch.Tensor, inputs: dict[str, torch.Tensor]) -> HeadOutput:
        """Log-probs of the recorded chain (``actions`` are its last sample, so they are not read)."""
        if CHAIN not in inputs:
            raise ValueError(f"policy.action_head=flow: forward_inputs have no {CHAIN!r}; only chunks sampled by "
                             "act can be scored (SFT uses the flow-matching loss, supervised_loss)")
        prefix = backbone.prefix()
        device = prefix.mask.device
        chain = inputs[CHAIN].to(device).float()  # [B, K + 1, C, A]
        batch = chain.shape[0]
        steps = self.logprob.replayed_steps(inputs, batch, self.steps, device)  # [B, S]
        n = steps.shape[1]
        cache = self.expert.encode_prefix(prefix).repeat(n)
        flat = steps.T.reshape(-1)  # copy j of the batch holds every row's j-th scored step
        rows = torch.arange(batch, device=device).repeat(n)
        x, target = chain[rows, flat], chain[rows, flat + 1]
        t = self._times(device)[flat]
        mean, std = self._step(x, t, cache, torch.ones_like(flat, dtype=torch.bool))
        logp = _gaussian_logp(target, mean, std).view(n, batch, self.chunk).sum(0)
        entropy = _gaussian_entropy(std).view(n, batch, self.chunk).sum(0)
        return HeadOutput(chain[:, -1], logp, entropy, prefix.hidden[-1][:, -1])

    def supervised_loss(self, backbone: Backbone, actions: torch.Tensor, inputs: dict[str, torch.Tensor],
                        mask: torch.Tensor) -> torch.Tensor:
        """π0's flow-matching loss (a flow head has no likelihood to maximise) on normalized ``actions``
        [B, C, A]: MSE of the velocity against ``noise - action``, averaged over the entries of executed
        actions (``mask`` [B, C])."""
        cache = self.expert.encode_prefix(backbone.prefix())
        batch, device = actions.shape[0], actions.device
        t = Beta(torch.tensor(1.5, device=device), torch.tensor(1.0, device=device)).sample((batch,)) * 0.999 + 0.001
        noise = torch.randn_like(actions)
        x_t = t[:, None, None] * noise + (1.0 - t[:, None, None]) * actions
        v, _ = self.expert(x_t, t, cache)
        error = (v - (noise - actions)).pow(2).mean(-1)  # [B, C]
        mask = mask.float()
        return (error * mask).sum() / mask.sum().clamp_min(1.0)


def _gaussian_logp(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per action [B, C]: the log-density of ``x`` summed over the action dimensions (std > 0 there)."""
    safe = std.clamp_min(1e-12)
    return (-0.5 * ((x - mean) / safe) ** 2 - safe.log() - 0.5 * LOG_2PI).sum(-1)


def _gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    return (0.5 + 0.5 * LOG_2PI + std.clamp_min(1e-12).log()).sum(-1)

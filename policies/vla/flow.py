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

**Sampling and log-probs** (``flow_steps`` Euler steps; Flow-SDE or Flow-Noise, ``policy.flow_logprob``)
are ``policies/flow_logprob.py``, shared with π0 (``policies/pi0/``): the head hands it the expert over
the cached prefix as its velocity. Everything ``evaluate`` needs to replay ``act`` is recorded in
``forward_inputs``: the chain of samples (``flow_chain`` [B, K + 1, C, A]) and, for ``sde``, the
stochastic step (``flow_step`` [B]). Log-probs are per action (``[B, C]``), so the actor masks actions
past an episode's end as for the other continuous head.

**SFT** is the flow-matching loss: ``t ~ Beta(1.5, 1) * 0.999 + 0.001`` (π0), the squared error of
the velocity against ``noise - action`` per action entry, masked past the episode end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Beta

from embodied.core import rng
from embodied.policies.flow_logprob import (CHAIN, STEP, FlowLogprob, Velocity, make_flow_logprob, sample_chain,
                                            score_chain)
from embodied.policies.vla.heads import ActionHead, Backbone, HeadOutput, Prefix



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
        """The cache with each row repeated ``n`` times in a row (row ``i``'s copy ``j`` at ``i * n + j``)."""
        if n == 1:
            return self
        return PrefixCache([(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in self.kv],
                           self.mask.repeat_interleave(n, 0))


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


class FlowHead(ActionHead):
    """Action chunks from a flow-matching expert over the cached backbone prefix (module docstring)."""

    granularity = "action"
    continuous = True

    def __init__(self, chunk: int, action_dim: int, placeholder_id: int, prefix_width: int, shape: ExpertShape,
                 steps: int, logprob: str, noise_level: float, noise_std: tuple[float, float]) -> None:
        super().__init__(chunk, action_dim, placeholder_id)
        self.expert = FlowExpert(chunk, action_dim, prefix_width, shape)
        self.steps = steps
        if logprob == "noise":
            self.noise_std = nn.Linear(shape.width, action_dim)  # only Flow-Noise has (and trains) it
        self.logprob: FlowLogprob = make_flow_logprob(logprob, noise_level, getattr(self, "noise_std", None),
                                                      noise_std)

    def describe(self) -> str:
        e = self.expert
        return (f" (flow expert: width {e.velocity.in_features}, depth {len(e.layers)}, "
                f"{e.layers[0].self_attn.heads} heads, {self.steps} Euler steps, log-probs {self.logprob.name})")

    def _velocity(self, cache: PrefixCache) -> Velocity:
        """The expert over ``cache`` as ``flow_logprob`` calls it (each cached row repeated in a row)."""
        return lambda x, t, repeats: self.expert(x, t, cache.repeat(repeats))

    def act(self, backbone: Backbone, batch: int, device: torch.device, deterministic: bool) -> HeadOutput:
        prefix = backbone.prefix()
        noise = rng.randn((batch, self.chunk, self.action_dim), device)
        out = sample_chain(self._velocity(self.expert.encode_prefix(prefix)), noise, self.steps, self.logprob,
                           deterministic)
        return HeadOutput(out.actions, out.logprobs, out.entropy, prefix.hidden[-1][:, -1], out.record)

    def steer(self, backbone: Backbone) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        """The prefix once, for DSRL: the last prompt token's hidden state [B, H] (what the value head reads), and
        the ODE from a given noise [B, C, A] to a normalized chunk, exactly ``act(deterministic=True)``'s loop."""
        prefix = backbone.prefix()
        velocity = self._velocity(self.expert.encode_prefix(prefix))

        def decode(noise: torch.Tensor) -> torch.Tensor:
            return sample_chain(velocity, noise, self.steps, self.logprob, deterministic=True).actions

        return prefix.hidden[-1][:, -1], decode

    def evaluate(self, backbone: Backbone, actions: torch.Tensor, inputs: dict[str, torch.Tensor]) -> HeadOutput:
        """Log-probs of the recorded chain (``actions`` are its last sample, so they are not read)."""
        if CHAIN not in inputs:
            raise ValueError(f"policy.action_head=flow: forward_inputs have no {CHAIN!r}; only chunks sampled by "
                             "act can be scored (SFT uses the flow-matching loss, supervised_loss)")
        prefix = backbone.prefix()
        device = prefix.mask.device
        replay = {k: v.to(device) for k, v in inputs.items() if k in (CHAIN, STEP)}
        logp, entropy = score_chain(self._velocity(self.expert.encode_prefix(prefix)), replay, self.steps,
                                    self.logprob)
        return HeadOutput(replay[CHAIN][:, -1].float(), logp, entropy, prefix.hidden[-1][:, -1])

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

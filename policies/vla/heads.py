"""Action heads of the VLA policy, chosen by ``policy.action_head``, behind one interface.

A head turns the backbone into action chunks. It gets a :class:`Backbone`: ``run(extra_ids,
extra_embeds) -> hidden [B, L + k, H]`` (one forward pass over the prompt plus ``k`` appended token
ids, whose input embeddings get ``extra_embeds`` [k, H] added when given), ``decode`` (one cached
step, for the autoregressive head), ``bin_logits(hidden) -> [.., n_bins]`` (the language-model head
restricted to the action-bin ids, i.e. logits masked to the action bins) and ``prefix()`` (every
layer's hidden states over the prompt, for the flow head). Every head returns the hidden state of
the last prompt token too, which the value head reads, and may return tensors to ``record`` in the
forward inputs, which ``evaluate`` gets back to replay ``act``.

- ``tokens`` (OpenVLA-OFT style): ``K = C x A`` placeholder tokens after the prompt, all decoded in
  one forward pass; position ``j`` scores the bin of action entry ``j``. Log-probs ``[B, C, A]``.
  Each placeholder gets a learned slot embedding (as DETR's object queries): identical inputs
  under causal attention would otherwise have to count to know which entry they predict.
- ``autoregressive`` (OpenVLA): one bin token per action entry, sampled one after another with the
  KV cache; replayed by one teacher-forced pass. Log-probs ``[B, C, A]``.
- ``gaussian`` (OFT regression, StarVLA's OFT head): a linear map per placeholder (slot embeddings as
  above) of its hidden state is that entry's mean in normalized units, with a learned
  state-independent log-std. Log-probs ``[B, C]``.
- ``flow`` (π0 / SmolVLA): a flow-matching action expert; see ``flow.py``. Log-probs ``[B, C]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from embodied.core import rng
from embodied.policy.base import masked_nll

Run = Callable[..., torch.Tensor]  # run(extra_ids [B, k] | None, extra_embeds [k, H] | None) -> hidden


@dataclass
class Prefix:
    """The backbone over the prompt alone: every layer's hidden states and where the tokens are."""

    hidden: tuple[torch.Tensor, ...]  # [B, L, H] each: the embeddings, then layer 1 ... N (the last normed)
    mask: torch.Tensor  # [B, L], 0 on left padding


@dataclass
class Backbone:
    """The calls into the backbone a head may make, over one batch of forward inputs."""

    run: Run
    decode: Callable[..., tuple[torch.Tensor, object]]  # decode(ids [B, 1] | None, past, step) -> (hidden, past)
    bin_logits: Callable[[torch.Tensor], torch.Tensor]
    prefix: Callable[[], Prefix]
    first_bin_id: int
    temperature: float


@dataclass
class HeadOutput:
    """What a head returns for a batch; actions are bins (token heads) or normalized values (continuous)."""

    actions: torch.Tensor  # long bins [B, C, A] or float normalized [B, C, A]
    logprobs: torch.Tensor  # [B, C, A] (token) or [B, C] (action)
    entropy: torch.Tensor  # same shape as logprobs
    prompt_hidden: torch.Tensor  # [B, H], hidden state of the last prompt token
    record: dict[str, torch.Tensor] = field(default_factory=dict)  # added to forward_inputs for evaluate


class ActionHead(nn.Module):
    """Interface: ``act`` samples (or picks the mode), ``evaluate`` scores given actions."""

    granularity: str = "token"
    continuous: bool = False  # actions are normalized values, not bins

    def __init__(self, chunk: int, action_dim: int, placeholder_id: int) -> None:
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.size = chunk * action_dim
        self.placeholder_id = placeholder_id

    def placeholders(self, batch: int, device: torch.device) -> torch.Tensor:
        return torch.full((batch, self.size), self.placeholder_id, dtype=torch.long, device=device)

    def describe(self) -> str:
        """What the startup line adds about this head beyond its parameter count (nothing by default)."""
        return ""

    def act(self, backbone: Backbone, batch: int, device: torch.device, deterministic: bool) -> HeadOutput:
        raise NotImplementedError

    def evaluate(self, backbone: Backbone, actions: torch.Tensor, inputs: dict[str, torch.Tensor]) -> HeadOutput:
        """Score ``actions`` (bins or normalized values) given the forward inputs ``act`` recorded."""
        raise NotImplementedError

    def supervised_loss(self, backbone: Backbone, actions: torch.Tensor, inputs: dict[str, torch.Tensor],
                        executed: torch.Tensor) -> torch.Tensor:
        """What ``embodied sft`` minimizes on demonstrated ``actions`` (bins or normalized values)
        [B, C, A], with ``executed`` [B, C] False past an episode's end: by default their negative
        log-likelihood under ``evaluate``."""
        return masked_nll(self.evaluate(backbone, actions, inputs).logprobs.float(), executed)


class SlotHead(ActionHead):
    """A head that decodes ``K`` placeholders in one pass, each with its own learned slot embedding."""

    def __init__(self, chunk: int, action_dim: int, placeholder_id: int, hidden_size: int) -> None:
        super().__init__(chunk, action_dim, placeholder_id)
        self.slots = nn.Parameter(torch.randn(self.size, hidden_size) * 0.02)

    def _slot_hidden(self, run: Run, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states of the K placeholders [B, K, H] and of the last prompt token [B, H]."""
        hidden = run(self.placeholders(batch, device), self.slots)
        prompt_len = hidden.shape[1] - self.size
        return hidden[:, prompt_len:], hidden[:, prompt_len - 1]


def _categorical(logits: torch.Tensor, temperature: float) -> Categorical:
    return Categorical(logits=logits.float() / temperature)


class TokenHead(SlotHead):
    """All action tokens from one forward pass over placeholders (parallel decoding)."""

    def _dist(self, backbone: Backbone, batch: int, device: torch.device) -> tuple[Categorical, torch.Tensor]:
        slots, h = self._slot_hidden(backbone.run, batch, device)
        return _categorical(backbone.bin_logits(slots), backbone.temperature), h

    def act(self, backbone, batch, device, deterministic):
        dist, h = self._dist(backbone, batch, device)
        bins = dist.logits.argmax(-1) if deterministic else rng.sample(dist)
        shape = (batch, self.chunk, self.action_dim)
        return HeadOutput(bins.view(shape), dist.log_prob(bins).view(shape), dist.entropy().view(shape), h)

    def evaluate(self, backbone, actions, inputs):
        batch = actions.shape[0]
        dist, h = self._dist(backbone, batch, actions.device)
        bins = actions.reshape(batch, -1)
        return HeadOutput(actions, dist.log_prob(bins).view(actions.shape), dist.entropy().view(actions.shape), h)


class AutoregressiveHead(ActionHead):
    """One bin token at a time with the KV cache; replayed teacher-forced in one pass."""

    def act(self, backbone, batch, device, deterministic):
        decode = backbone.decode
        hidden, past = decode(None, None, 0)  # the prompt, filling the cache
        h = prompt_hidden = hidden[:, -1]
        bins, logps, ents = [], [], []
        for k in range(self.size):
            dist = _categorical(backbone.bin_logits(h), backbone.temperature)
            b = dist.logits.argmax(-1) if deterministic else rng.sample(dist)
            bins.append(b), logps.append(dist.log_prob(b)), ents.append(dist.entropy())
            if k + 1 < self.size:
                hidden, past = decode(b[:, None], past, k)
                h = hidden[:, -1]
        shape = (batch, self.chunk, self.action_dim)
        return HeadOutput(torch.stack(bins, 1).view(shape), torch.stack(logps, 1).view(shape),
                          torch.stack(ents, 1).view(shape), prompt_hidden)

    def evaluate(self, backbone, actions, inputs):
        batch = actions.shape[0]
        bins = actions.reshape(batch, -1)
        hidden = backbone.run(backbone.first_bin_id + bins[:, :-1])  # [B, L + K - 1, H]
        prompt_len = hidden.shape[1] - (self.size - 1)
        dist = _categorical(backbone.bin_logits(hidden[:, prompt_len - 1:]), backbone.temperature)
        return HeadOutput(actions, dist.log_prob(bins).view(actions.shape), dist.entropy().view(actions.shape),
                          hidden[:, prompt_len - 1])


class GaussianHead(SlotHead):
    """A regressed chunk mean (normalized units) from the placeholders' hidden states; learned log-std."""

    granularity = "action"
    continuous = True

    def __init__(self, chunk: int, action_dim: int, placeholder_id: int, hidden_size: int,
                 init_log_std: float) -> None:
        super().__init__(chunk, action_dim, placeholder_id, hidden_size)
        self.mean_weight = nn.Parameter(torch.randn(self.size, hidden_size) * 0.01)  # one linear map per slot
        self.mean_bias = nn.Parameter(torch.zeros(self.size))
        self.log_std = nn.Parameter(torch.full((self.size,), float(init_log_std)))

    def _dist(self, backbone: Backbone, batch: int, device: torch.device) -> tuple[Normal, torch.Tensor]:
        slots, h = self._slot_hidden(backbone.run, batch, device)
        mean = (slots.float() * self.mean_weight).sum(-1) + self.mean_bias  # [B, K]
        return Normal(mean, self.log_std.exp().expand_as(mean)), h

    def _shape(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], self.chunk, self.action_dim)

    def act(self, backbone, batch, device, deterministic):
        dist, h = self._dist(backbone, batch, device)
        flat = dist.mean if deterministic else rng.sample(dist)
        return HeadOutput(self._shape(flat), self._shape(dist.log_prob(flat)).sum(-1),
                          self._shape(dist.entropy()).sum(-1), h)

    def evaluate(self, backbone, actions, inputs):
        dist, h = self._dist(backbone, actions.shape[0], actions.device)
        flat = actions.reshape(actions.shape[0], -1).float()
        return HeadOutput(actions, self._shape(dist.log_prob(flat)).sum(-1), self._shape(dist.entropy()).sum(-1), h)



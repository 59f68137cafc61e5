"""π0.5 as transformers' π0 plus its difference, in the style of a transformers ``modular_<name>.py``.

transformers ships π0 only (``PI0ForConditionalGeneration``). π0.5 shares its PaliGemma prefix, its KV cache, its
Euler loop (``sample_actions``), its flow-matching loss and time sampling (``forward``); what differs, read from
LeRobot 0.6.1's ``policies/pi05/`` and ``policies/pi_gemma.py`` (openpi's π0.5), is written here and nothing else:

- **adaRMS in the action expert only** (:class:`PI05AdaptiveNorm`): each expert layer's ``input_layernorm`` and
  ``post_attention_layernorm`` and the expert's final ``norm`` take the flow time's condition through ``dense``
  (cond -> 3 x width, its weight zero-initialised): ``scale, shift, gate``; ``out = rms(x) * (1 + scale) + shift``
  and the residual is gated, ``x + y * gate`` (:class:`PI05DecoderLayer`). These norms have no ``weight``.
- **the time condition** (:class:`PI05ActionTimeEmbedding`): the sinusoid of the flow time (in float64, as
  LeRobot computes it) through ``time_mlp_in`` -> SiLU -> ``time_mlp_out`` -> SiLU; the action tokens are
  ``action_in_proj(noisy_actions)`` alone, and there is no ``state_proj`` (the state is in the prompt).
- **the attention blocks** (:class:`PI05Model`): the prefix, then the action tokens as one block (π0 has a state
  token first).

``embed_action_time(state, noise, time)`` returns an :class:`ExpertInput` (the action tokens and their condition)
that ``PI05Model.forward`` takes as ``action_embeds``, so π0's ``forward`` and ``sample_actions`` run unchanged.

    model = PI05ForConditionalGeneration(PI05Config(vlm_config=..., dit_config=..., chunk_size=10))
    chunk = model.sample_actions(state=zeros, input_ids=ids, pixel_values=px, attention_mask=mask,
                                 pixel_attention_mask=cams)    # state is not read: π0.5 has it in the prompt
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PI0Config, PI0ForConditionalGeneration
from transformers.masking_utils import create_causal_mask
from transformers.models.auto import AutoModel
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer, GemmaModel
from transformers.models.pi0.modeling_pi0 import PI0Model, PI0PreTrainedModel


class PI05Config(PI0Config):
    """``PI0Config``'s fields and sub-configs; only the model type differs (π0.5's layers are this file's)."""

    model_type = "pi05"


class ExpertInput(NamedTuple):
    """What π0.5's expert takes: the action tokens and the flow time's adaRMS condition."""

    embeds: torch.Tensor  # [B, chunk_size, W]
    cond: torch.Tensor  # [B, W]


class PI05AdaptiveNorm(nn.Module):
    """Gemma's RMS norm conditioned on the flow time: ``dense(cond)`` gives scale, shift and the residual's gate.
    As the expert's final norm it is the identity when called without a condition (see :class:`PI05Expert`)."""

    def __init__(self, dim: int, eps: float, cond_dim: int) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        self.dense.adarms = True  # transformers' init visits it after its parent: init_adaptive_norm knows it so

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        normed = x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + self.eps)  # float32, as LeRobot's
        modulation = self.dense(cond)
        if x.dim() == 3:
            modulation = modulation[:, None]
        scale, shift, gate = modulation.chunk(3, dim=-1)
        return (normed * (1 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def init_adaptive_norm(module: nn.Module) -> None:
    """LeRobot's initialisation of an adaRMS ``dense``: its weight zero, its bias nn.Linear's default."""
    if isinstance(module, nn.Linear) and getattr(module, "adarms", False):
        bound = 1 / math.sqrt(module.in_features)
        with torch.no_grad():
            module.weight.zero_()
            module.bias.uniform_(-bound, bound)


def open_adaptive_gates(model: nn.Module) -> None:
    """Start every adaRMS norm as the identity with its residual gate open: ``dense``'s weight and its scale and
    shift biases zero, its gate bias one. A π0.5 expert so started computes, at step 0, what π0's expert (Gemma's
    norms, their weights zero) computes, and learns the time's modulation from there. LeRobot's initialisation
    (:func:`init_adaptive_norm`) draws the gate biases around zero: the expert's layers then add ±0.1 of their
    output, and a tiny π0.5 trained from scratch on PickColor kept them near 0.05 for three epochs and reached
    10-16% where, with the gates open, it reached 39-43% (docs/sft_then_rl.md, "PickColor-v0, π0.5")."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear) and getattr(module, "adarms", False):
                module.weight.zero_()
                module.bias.zero_()
                module.bias[2 * module.out_features // 3:] = 1.0


class PI05DecoderLayer(GemmaDecoderLayer):
    """Gemma's layer with adaRMS norms and gated residuals; ``adarms_cond`` [B, W] comes through the model's kwargs."""

    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        self.input_layernorm = PI05AdaptiveNorm(config.hidden_size, config.rms_norm_eps, config.hidden_size)
        self.post_attention_layernorm = PI05AdaptiveNorm(config.hidden_size, config.rms_norm_eps, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                cache: Any = None, use_cache: bool | None = False, position_embeddings: Any = None,
                adarms_cond: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        normed, gate = self.input_layernorm(hidden_states, adarms_cond)
        attended, _ = self.self_attn(hidden_states=normed, attention_mask=attention_mask, position_ids=position_ids,
                                     cache=cache, use_cache=use_cache, position_embeddings=position_embeddings,
                                     **kwargs)
        hidden_states = hidden_states + attended * gate
        normed, gate = self.post_attention_layernorm(hidden_states, adarms_cond)
        return hidden_states + self.mlp(normed) * gate


class PI05Expert(GemmaModel):
    """Gemma with :class:`PI05DecoderLayer` layers and an adaRMS final ``norm`` (``forward(..., adarms_cond=c)``)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        width, eps = config.hidden_size, config.rms_norm_eps
        self.layers = nn.ModuleList(PI05DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = PI05AdaptiveNorm(width, eps, width)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        init_adaptive_norm(module)

    def forward(self, *args: Any, adarms_cond: torch.Tensor, **kwargs: Any) -> Any:
        final, self.norm = self.norm, _PassThrough()  # GemmaModel.forward ends with self.norm(h): done here instead
        try:
            out = super().forward(*args, adarms_cond=adarms_cond, **kwargs)
        finally:
            self.norm = final
        out.last_hidden_state = final(out.last_hidden_state, adarms_cond)[0]
        return out


class _PassThrough(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class PI05ActionTimeEmbedding(nn.Module):
    """The action tokens (``action_in_proj`` of the noisy actions) and the time condition (sinusoid -> MLP)."""

    def __init__(self, config: PI05Config) -> None:
        super().__init__()
        self.config = config
        width = config.dit_config.hidden_size
        self.action_in_proj = nn.Linear(config.max_action_dim, width)
        self.time_mlp_in = nn.Linear(width, width)
        self.time_mlp_out = nn.Linear(width, width)

    def sinusoid(self, time: torch.Tensor) -> torch.Tensor:
        """openpi's ``create_sinusoidal_pos_embedding`` in float64, cast to float32 (LeRobot's, exactly)."""
        half = self.config.dit_config.hidden_size // 2
        wide = torch.float64 if time.device.type != "mps" else torch.float32
        fraction = torch.linspace(0.0, 1.0, half, dtype=wide, device=time.device)
        period = self.config.min_period * (self.config.max_period / self.config.min_period) ** fraction
        angle = (1.0 / period * 2 * math.pi)[None, :] * time[:, None]
        return torch.cat([angle.sin(), angle.cos()], dim=1).float()

    def forward(self, state: torch.Tensor | None, noise: torch.Tensor, timestep: torch.Tensor) -> ExpertInput:
        """``state`` is not read (π0.5 writes it into the prompt); π0's signature is kept so its loops run."""
        embeds = self.action_in_proj(noise)
        time = self.sinusoid(timestep.float()).to(embeds.dtype)
        cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(time))))
        return ExpertInput(embeds, cond)


class PI05Model(PI0Model):
    """π0's model with :class:`PI05Expert` as ``dit`` and the action tokens as one attention block."""

    def __init__(self, config: PI05Config) -> None:
        PI0PreTrainedModel.__init__(self, config)
        self.dit = PI05Expert(config.dit_config)
        self.vlm = AutoModel.from_config(config.vlm_config)
        self.post_init()

    def forward(self, action_embeds: ExpertInput, input_ids: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                pixel_attention_mask: torch.Tensor | None = None, position_ids: Any = None,
                inputs_embeds: torch.Tensor | None = None, cache: Any = None, **kwargs: Any) -> Any:
        """The expert over the prefix's cache (built here from the prompt and images when not given; the prefix's
        ``position_ids`` are the attention mask's, as π0 computes them)."""
        embeds, cond = action_embeds
        if cache is None:
            prefix = inputs_embeds if inputs_embeds is not None else \
                self.embed_prefix(input_ids, pixel_values, pixel_attention_mask)
            cache = self.vlm(inputs_embeds=prefix, attention_mask=attention_mask,
                             position_ids=attention_mask.cumsum(-1) - 1,
                             token_type_ids=torch.zeros_like(prefix)[:, :, 0], use_cache=True).cache
        batch, chunk = embeds.shape[:2]
        full = torch.cat([attention_mask, attention_mask.new_ones(batch, chunk)], dim=1)
        positions = (full.cumsum(1) - 1)[:, -chunk:]
        blocks = torch.cat([torch.zeros(cache.get_seq_length(), dtype=torch.long, device=embeds.device),
                            torch.ones(chunk, dtype=torch.long, device=embeds.device)])[None].repeat(batch, 1)
        mask = create_causal_mask(config=self.config.dit_config, inputs_embeds=embeds, attention_mask=full,
                                  cache=cache, block_sequence_ids=blocks)
        return self.dit(inputs_embeds=embeds, attention_mask=mask, position_ids=positions, cache=cache,
                        adarms_cond=cond, **kwargs)


class PI05ForConditionalGeneration(PI0ForConditionalGeneration):
    """π0's flow-matching head over :class:`PI05Model`: ``forward`` (the loss) and ``sample_actions`` are π0's."""

    config_class = PI05Config

    def __init__(self, config: PI05Config) -> None:
        PI0PreTrainedModel.__init__(self, config)
        self.model = PI05Model(config)
        self.expert_hidden_size = config.dit_config.hidden_size
        self.embed_action_time = PI05ActionTimeEmbedding(config)
        self.action_out_proj = nn.Linear(self.expert_hidden_size, config.max_action_dim)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        init_adaptive_norm(module)

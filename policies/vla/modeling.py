"""The VLA policy: a transformers image-text-to-text backbone, an action head, a value head.

    policy = VLAPolicy(VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=4), spec)
    out = policy.act(obs)            # obs: main_images uint8 [B, H, W, 3], task_descriptions, ...
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)   # replays act exactly

The backbone is loaded with ``AutoModelForImageTextToText.from_pretrained`` and called through its
own inner model (``backbone.model``), so only the rows of the LM head that score action bins are
ever computed. ``forward_inputs`` hold uint8 images and token ids (never float pixels), so a
rollout epoch stays small and ``evaluate`` rebuilds the same pixels and positions. With
``policy.lora_rank > 0`` the backbone is frozen and peft's LoRA adapters train (with the value
head, the gaussian head and the state projection); ``trainable_state`` is what weight sync sends.

Device, dtype, LoRA, activation checkpointing, FSDP units and the checkpoint folder are the base's
(``policies/transformers_base/``); this file is the VLA's difference: the backbone's family, its prompt
and pixels, the action heads, the state token, and its hooks (LoRA targets, freezing, ``heads.pt``'s
modules, ``action_tokenizer.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, NoiseSteering, Obs, PolicyOutput
from embodied.policies.transformers_base.folders import load_tokenizer
from embodied.policies.transformers_base.modeling import TransformersPolicy
from embodied.policies.vla.action_tokenizer import ActionTokenizer, stats_bounds
from embodied.policies.vla.configuration import VLAConfig
from embodied.policies.vla.flow import ExpertShape, FlowHead
from embodied.policies.vla.heads import ActionHead, AutoregressiveHead, Backbone, GaussianHead, Prefix, TokenHead
from embodied.policies.vla.processing import VLAProcessor, family_of
from embodied.policies.vla.tiny import resolve_model_path
from embodied.policy.base import PolicySpec

DEFAULT_LORA_TARGETS = {  # the language model's attention and MLP projections (not the vision tower)
    "smolvlm": r".*text_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    "qwen": r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    "paligemma": r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
}


class VLAPolicy(TransformersPolicy):
    """Vision-language-action policy over a transformers backbone (see the module docstring)."""

    model_attribute = "backbone"  # the transformers model (and its state-dict prefix)
    model_folder = "backbone"  # a checkpoint's fully trained backbone: <policy>/backbone/
    lora_field = "policy.lora_target_modules"
    checkpointing_scope = "the backbone's {n} layers"

    def __init__(self, config: VLAConfig, spec: PolicySpec) -> None:
        if spec.image_shape is not None and config.use_states and spec.state_dim <= 0:
            raise ValueError("policy.use_states: the env gives no states; set env.obs_mode to 'state+rgb' "
                             "or policy.use_states=false")
        super().__init__(config, spec, resolve_model_path(config.model_path))
        from transformers import AutoModelForImageTextToText

        self.tokenizer = load_tokenizer(self.model_dir)
        backbone = AutoModelForImageTextToText.from_pretrained(self.model_dir, dtype=self.dtype_)
        self.family = family_of(backbone.config)
        self.action_tokenizer = self._action_tokenizer(config, spec, backbone)
        self.use_wrist = config.use_wrist_image and spec.wrist_image_shape is not None
        self.processor = VLAProcessor(self.tokenizer, backbone.config, self.model_dir, image_size=config.image_size,
                                      env_image_size=spec.image_shape[0], num_images=1 + int(self.use_wrist),
                                      use_states=config.use_states,
                                      max_instruction_tokens=config.max_instruction_tokens,
                                      instruction_template=config.instruction_template)
        hidden = int(backbone.config.get_text_config().hidden_size)
        self.head: ActionHead = make_head(config, self.chunk, self.action_dim, self.processor.pad_id, hidden)
        self.logprob_granularity = self.head.granularity  # per instance: it depends on the head
        self.value_head = self.make_value_head(hidden)
        self.state_proj = nn.Linear(spec.state_dim, hidden) if config.use_states else None
        self.backbone = backbone
        self.setup_training()

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def _action_tokenizer(config: VLAConfig, spec: PolicySpec, backbone: Any) -> ActionTokenizer:
        vocab = int(backbone.get_output_embeddings().weight.shape[0])
        if config.action_norm == "model_stats":
            low, high = stats_bounds(resolve_model_path(config.model_path))
            if len(low) != spec.action_dim:
                raise ValueError(f"policy.action_norm=model_stats: action_stats.json has {len(low)} action "
                                 f"dimensions but the env's action space has {spec.action_dim}")
        else:
            low, high = list(spec.action_low), list(spec.action_high)
        return ActionTokenizer(config.bins, vocab, low, high)

    def freeze(self) -> None:
        if self.config.freeze_backbone:
            # The value loss and the policy gradient then reach only the heads: the features the action head
            # reads stay those the SFT run learnt, and each update skips the backbone's backward pass.
            self.backbone.requires_grad_(False)
        if self.head.continuous:
            lm_head = self.backbone.get_output_embeddings().weight
            if lm_head is not self.backbone.get_input_embeddings().weight:
                lm_head.requires_grad_(False)  # the gaussian head never reads the LM head: nothing to train or sync

    def lora_targets(self) -> tuple[Any, None]:
        """``policy.lora_target_modules`` (each must name a module), else the family's language-model projections."""
        targets = self.config.lora_target_modules
        if targets:
            names = [n for n, _ in self.backbone.named_modules()]
            missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
            if missing:
                raise ValueError(f"policy.lora_target_modules: {missing} match no module of the backbone "
                                 f"({type(self.backbone).__name__}); e.g. q_proj, v_proj, up_proj")
        return targets or DEFAULT_LORA_TARGETS[self.family], None

    # -- the policy interface ----------------------------------------------------------------

    def describe(self) -> str:
        head = sum(p.numel() for p in self.head.parameters())
        return (f"{super().describe()}; {self.family} backbone, {self.config.action_head} action head "
                f"{head / 1e6:.2f}M{self.head.describe()}{self.describe_training()}")

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        inputs = self.forward_inputs(obs)
        out = self.head.act(self._backbone(inputs), inputs["input_ids"].shape[0], self.device_, deterministic)
        inputs |= {k: v.detach().cpu() for k, v in out.record.items()}
        if self.head.continuous:
            actions = self.action_tokenizer.denormalize(out.actions.double()).float()
        else:
            actions = self.action_tokenizer.decode(out.actions)
        return PolicyOutput(actions=actions.cpu(), logprobs=out.logprobs.float().cpu(),
                            values=self._value(out.prompt_hidden).cpu(), forward_inputs=inputs)

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        out = self.head.evaluate(self._backbone(forward_inputs), self._head_actions(actions), forward_inputs)
        return out.logprobs.float(), out.entropy.float(), self._value(out.prompt_hidden)

    def flow_feature_size(self) -> int:
        """F of ``steer(obs).features``: the backbone's hidden size."""
        return int(self.backbone.config.get_text_config().hidden_size)

    @torch.no_grad()
    def steer(self, obs: Obs) -> NoiseSteering:
        """DSRL: the backbone over ``obs`` once; its features (the last prompt token's final hidden state, which
        sees the images, the instruction and the state token) and the flow head's ODE from a given noise."""
        if not isinstance(self.head, FlowHead):
            raise ValueError(f"policy.action_head={self.config.action_head} starts from no noise that DSRL could "
                             "steer; use policy.action_head=flow")
        features, decode = self.head.steer(self._backbone(self.forward_inputs(obs)))

        @torch.no_grad()
        def actions(noise: torch.Tensor) -> torch.Tensor:
            x = decode(noise.to(self.device_, torch.float32))
            return self.action_tokenizer.denormalize(x.double()).float().cpu()

        return NoiseSteering(features.float().cpu(), actions)

    def supervised_loss(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor,
                        executed: torch.Tensor) -> torch.Tensor:
        """The head's own objective (``ActionHead.supervised_loss``): the negative log-likelihood, or the
        flow head's flow-matching loss."""
        return self.head.supervised_loss(self._backbone(forward_inputs), self._head_actions(actions), forward_inputs,
                                         executed.to(self.device_))

    def _head_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions as the head sees them: normalized values (continuous heads) or bins."""
        actions = actions.to(self.device_)
        if self.head.continuous:
            return self.action_tokenizer.normalize(actions.double()).float()
        return self.action_tokenizer.encode(actions)

    @torch.no_grad()
    def value(self, obs: Obs) -> torch.Tensor:
        hidden = self._backbone(self.forward_inputs(obs)).run(None)
        return self._value(hidden[:, -1]).cpu()

    # -- inputs ------------------------------------------------------------------------------

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """What ``evaluate`` replays: prompt token ids and uint8 images (CPU), plus states if used."""
        prompt = self.processor.prompts(self.instructions(obs))
        inputs = {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask,
                  MAIN_IMAGES: self.uint8_images(obs[MAIN_IMAGES])}
        if self.use_wrist:
            inputs[WRIST_IMAGES] = self.uint8_images(obs[WRIST_IMAGES])
        if self.state_proj is not None:
            inputs[STATES] = torch.as_tensor(np.asarray(obs[STATES]), dtype=torch.float32)
        return inputs

    def _backbone(self, inputs: dict[str, torch.Tensor]) -> Backbone:
        """The calls a head makes over a batch: ``run(extra_ids)`` (one forward pass), ``decode(ids,
        past, step)`` (cached), ``prefix()`` (every layer's hidden states over the prompt)."""
        dev = self.device_
        ids, mask = inputs["input_ids"].to(dev), inputs["attention_mask"].to(dev)
        images = [inputs[MAIN_IMAGES]] + ([inputs[WRIST_IMAGES]] if self.use_wrist else [])
        pixels = self.processor.pixel_inputs(images, dev, self.dtype_)
        positions = self.processor.positions(self._inner, ids, mask, pixels)
        states = inputs[STATES].to(dev) if self.state_proj is not None else None

        def embed(token_ids: torch.Tensor, with_state: bool) -> torch.Tensor:
            x = self.backbone.get_input_embeddings()(token_ids)
            if with_state and states is not None:
                pos = self.processor.state_position
                token = self.state_proj(states).to(x.dtype)[:, None]
                x = torch.cat([x[:, :pos], token, x[:, pos + 1:]], 1)
            return x

        def run(extra: torch.Tensor | None, extra_embeds: torch.Tensor | None = None) -> torch.Tensor:
            full_ids, full_mask, full_pos = ids, mask, positions
            if extra is not None and extra.shape[1] > 0:
                full_ids = torch.cat([ids, extra], 1)
                full_mask = torch.cat([mask, torch.ones_like(extra)], 1)
                full_pos = torch.cat([positions, self.processor.next_positions(positions, extra.shape[1])], -1)
            x = embed(full_ids, True)
            if extra_embeds is not None:  # the heads' slot embeddings, added to the appended tokens
                k = extra_embeds.shape[0]
                x = torch.cat([x[:, :-k], x[:, -k:] + extra_embeds.to(x.dtype)], 1)
            out = self._inner(inputs_embeds=x, attention_mask=full_mask, position_ids=full_pos,
                              use_cache=False, **pixels)
            return out.last_hidden_state

        def decode(token: torch.Tensor | None, past: Any, step: int):
            if token is None:  # the prompt, filling the cache
                out = self._inner(inputs_embeds=embed(ids, True), attention_mask=mask, position_ids=positions,
                                  use_cache=True, **pixels)
                return out.last_hidden_state, out.cache
            full_mask = torch.cat([mask, torch.ones(mask.shape[0], step + 1, dtype=mask.dtype, device=dev)], 1)
            pos = self.processor.next_positions(positions, step + 1)[..., -1:]
            out = self._inner(inputs_embeds=embed(self.action_tokenizer.first_token_id + token, False),
                              attention_mask=full_mask, position_ids=pos, cache=past, use_cache=True)
            return out.last_hidden_state, out.cache

        def prefix() -> Prefix:
            out = self._inner(inputs_embeds=embed(ids, True), attention_mask=mask, position_ids=positions,
                              use_cache=False, output_hidden_states=True, **pixels)
            hidden = tuple(out.hidden_states[:-1]) + (out.last_hidden_state,)  # the last one normed
            return Prefix(hidden, mask)

        return Backbone(run, decode, self._bin_logits, prefix, self.action_tokenizer.first_token_id,
                        self.config.temperature)

    @property
    def _inner(self) -> Any:
        """The backbone's model without its LM head (Idefics3Model, Qwen2_5_VLModel, ...)."""
        return self.backbone.model

    def _bin_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the action-bin ids only: the LM head's last ``n_bins`` rows (float32)."""
        lm_head = self.backbone.get_output_embeddings()
        n = self.action_tokenizer.n_bins
        bias = lm_head.bias[-n:] if getattr(lm_head, "bias", None) is not None else None
        return F.linear(hidden, lm_head.weight[-n:], bias).float()

    def _value(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.value_head(hidden.float()).squeeze(-1)

    # -- checkpoints: the base's folder layout (backbone/ or adapter/, heads.pt, embodied_policy.json) -----

    def head_modules(self) -> dict[str, nn.Module]:
        mods = {"value_head": self.value_head, "head": self.head}
        if self.state_proj is not None:
            mods["state_proj"] = self.state_proj
        return mods

    def saved_head_state(self, name: str, module: nn.Module, saved: dict[str, torch.Tensor]) -> dict[str, Any]:
        if isinstance(module, FlowHead):  # sde <-> noise: Flow-Noise's std head starts fresh, or is left out
            own = module.state_dict()
            saved = {k: v for k, v in own.items() if k.startswith("noise_std.")} | {
                k: v for k, v in saved.items() if k in own or not k.startswith("noise_std.")}
        return saved

    def save_own_files(self, out: Path) -> None:
        """``action_tokenizer.json``: the bins and bounds."""
        self.action_tokenizer.save(out)

    def load_own_files(self, src: Path) -> None:
        saved = ActionTokenizer.load(src)
        if saved.action_dim != self.action_dim:
            raise ValueError(f"checkpoint {src} acts in {saved.action_dim} action dimensions, the env in "
                             f"{self.action_dim}")
        self.action_tokenizer = saved

    def policy_meta(self) -> dict[str, Any]:
        return {"family": self.family, "image_size": self.processor.image_size, "prompt_length": self.processor.length}


def make_head(config: VLAConfig, chunk: int, action_dim: int, placeholder_id: int, hidden_size: int) -> ActionHead:
    """The head ``policy.action_head`` names."""
    name = config.action_head
    if name == "tokens":
        return TokenHead(chunk, action_dim, placeholder_id, hidden_size)
    if name == "autoregressive":
        return AutoregressiveHead(chunk, action_dim, placeholder_id)
    if name == "gaussian":
        return GaussianHead(chunk, action_dim, placeholder_id, hidden_size, config.init_log_std)
    if name == "flow":
        shape = ExpertShape(config.flow_width, config.flow_depth, config.flow_heads)
        return FlowHead(chunk, action_dim, placeholder_id, hidden_size, shape, config.flow_steps,
                        config.flow_logprob, config.flow_noise_level,
                        (config.flow_noise_std_min, config.flow_noise_std_max))
    raise ValueError(f"policy.action_head: unknown head {name!r}; known: tokens, autoregressive, gaussian, flow")


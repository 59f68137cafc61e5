"""π0 as a policy: transformers' ``PI0ForConditionalGeneration`` with the RL around it.

    policy = PI0Policy(PI0PolicyConfig(model_path="tiny:pi0-tiny", action_chunk=4), spec)
    out = policy.act(obs)            # obs: main_images uint8 [B, H, W, 3], task_descriptions, states
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)   # replays act exactly

π0's layers, its KV cache and its flow-matching loss are transformers'. What is ours:

- **The recorded Euler loop.** ``act`` runs the VLM prefix once (``model.model.embed_prefix`` and
  ``model.model.vlm`` with ``use_cache=True``), then ``flow_steps`` action-expert passes over that
  cache (``embed_action_time`` -> ``model.model`` -> ``action_out_proj``, what ``forward`` runs), each
  followed by ``cache.crop`` back to the prefix: without the crop the next step silently attends to
  the previous step's action tokens. The chain of samples is recorded; with ``deterministic`` the
  loop is the ODE from noise, step for step what ``sample_actions`` computes.
- **Log-probs** through ``policies/flow_logprob.py`` (Flow-SDE or Flow-Noise, one implementation
  with our flow head). ``evaluate`` replays every scored step in one batched pass: the prefix with
  gradients on B rows, ``cache.batch_repeat_interleave(S)``, one expert pass on B·S rows. Only the
  executed chunk positions and the env's action dimensions draw noise and are scored; the padded
  dimensions and the positions past ``action_chunk`` follow the ODE.
- **The value head** reads the VLM prefix (the masked mean of its last hidden states) and the
  normalized state. The prefix is what π0 already computes once per chunk, it sees the images and
  the instruction, and the state enters π0 only in the expert's suffix, so it is added here. The
  prefix's last layer and final norm are reached by the value loss alone (the expert reads only the
  VLM's keys and values), so under GRPO they get no gradient on any rank.
- **LoRA** (peft) on the VLM's language model and the expert (their attention and MLP projections,
  not SigLIP), with the action/time/state projections trained whole (``modules_to_save``).
  The expert's ``embed_tokens`` (263M at full size) is never read by π0, so it is frozen.

Device, dtype, LoRA through peft, activation checkpointing, FSDP units and the checkpoint folder are the base's
(``policies/transformers_base/``); π0 fills its hooks: the LoRA targets above, its freezing, the vision tower as
the checkpointed part, ``heads.pt``'s modules, and its statistics and processor settings as its own files.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from embodied.core import rng
from embodied.core.types import STATES, NoiseSteering, Obs, PolicyOutput
from embodied.policies.flow_logprob import CHAIN, STEP, Velocity, make_flow_logprob, sample_chain, score_chain
from embodied.policies.pi0.configuration import PI0PolicyConfig, size_problems
from embodied.policies.pi0.folders import camera_sources, folder_max_length, read_config_json
from embodied.policies.pi0.pretrained import load_pi0, parameter_split, resolve_model_path, seed_vlm
from embodied.policies.pi0.processing import STD_EPS, NormStats, PI0Inputs, fitted_stats, folder_stats
from embodied.policies.transformers_base.modeling import TransformersPolicy
from embodied.policy.base import PolicySpec

PROCESSOR_FILE = "processor_config.json"  # PI0Processor's statistics and our pipeline's settings
LORA_TARGETS = r"model\.(vlm\.language_model|dit)\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
PROJECTIONS = ["embed_action_time", "action_out_proj"]  # trained whole under LoRA


@dataclass
class Prefix:
    """The VLM over the prompt and images: its cache, last hidden states, mask, and the padded state."""

    cache: Any  # transformers DynamicCache, one entry per VLM layer
    hidden: torch.Tensor  # [B, L, H]
    mask: torch.Tensor  # [B, L], 0 on padding
    state: torch.Tensor  # [B, max_state_dim], normalized, in the model's dtype
    length: int  # the cache's length (L)


class PI0Policy(TransformersPolicy):
    """π0 (transformers' PI0ForConditionalGeneration) acting in an env (see the module docstring)."""

    logprob_granularity = "action"
    model_attribute = "model"  # the transformers model (and its state-dict prefix)
    model_folder = ""  # a checkpoint's fully trained π0 is the folder itself (PI0ForConditionalGeneration opens it)
    optional_heads = ("noise_std",)  # sde -> noise: Flow-Noise's std head starts fresh
    checkpointing_scope = "the vision tower's {n} layers only"  # a VLM or expert layer would append to the cache again

    # What a subclass on π0's machinery (π0.5) replaces: its folders, its model, its prompt, its statistics' buffers.
    resolve_folder = staticmethod(resolve_model_path)
    inputs_class = PI0Inputs
    prompt_length = staticmethod(folder_max_length)
    stat_buffers = ("state_mean", "state_std", "action_mean", "action_std")

    @staticmethod
    def load_model(path: Path, dtype: torch.dtype, tokenizer_path: str | None) -> tuple[Any, Any, str]:
        """(the transformers model, its tokenizer, where it came from); the module's ``load_pi0``, looked up when
        called (``benchmarks/pi0_gpu.py`` replaces it)."""
        return load_pi0(path, dtype, tokenizer_path)

    def __init__(self, config: PI0PolicyConfig, spec: PolicySpec) -> None:
        super().__init__(config, spec, self.resolve_folder(config.model_path))
        model, self.tokenizer, self.source = self.load_model(self.model_dir, self.dtype_, config.tokenizer_path)
        if config.init_vlm_from:
            with torch.no_grad():
                seed_vlm(model, Path(config.init_vlm_from).expanduser())
        pc = model.config
        self.chunk_size, self.max_action_dim, self.max_state_dim = pc.chunk_size, pc.max_action_dim, pc.max_state_dim
        self.state_dim = spec.state_dim if config.use_states else 0
        folder = read_config_json(self.model_dir) or {}
        self._check_sizes(config, spec, folder)
        sources = camera_sources(config.cameras, config.use_wrist_image, spec.wrist_image_shape is not None, folder)
        self.cameras = [c for c in sources if c != "empty"]  # the env images π0 sees, in the model's camera order
        self.steps = config.flow_steps or int(pc.num_inference_steps)
        self.inputs = self.inputs_class(self.tokenizer, pc, len(self.cameras),
                                        config.max_instruction_tokens or self.prompt_length(folder))
        self.stats_source = ""
        for name in self.stat_buffers:
            self.register_buffer(name, torch.zeros(0))
        self.set_stats(self._initial_stats(config, spec))
        hidden = int(pc.vlm_config.text_config.hidden_size)
        self.value_head = self.make_value_head(hidden + self.max_state_dim)
        if config.flow_logprob == "noise":
            self.noise_std = nn.Linear(int(pc.dit_config.hidden_size), self.max_action_dim)
        self.logprob = make_flow_logprob(config.flow_logprob, config.flow_noise_level, getattr(self, "noise_std", None),
                                         (config.flow_noise_std_min, config.flow_noise_std_max))
        scored = torch.zeros(self.chunk_size, self.max_action_dim, dtype=torch.bool)
        scored[:self.chunk, :self.action_dim] = True
        self.register_buffer("scored", scored, persistent=False)
        self.model = model
        self.setup_training()

    # -- construction ------------------------------------------------------------------------

    def _check_sizes(self, config: PI0PolicyConfig, spec: PolicySpec, folder: dict[str, Any]) -> None:
        where = f"policy.model_path {config.model_path!r}"
        problems = size_problems(config, spec, self.max_action_dim, self.max_state_dim, where, folder)
        if config.action_chunk > self.chunk_size:
            problems.append(f"policy.action_chunk: {config.action_chunk} executed actions, but {where} predicts "
                            f"chunks of {self.chunk_size} (its chunk_size)")
        if problems:
            raise ValueError("; ".join(problems))

    def _initial_stats(self, config: PI0PolicyConfig, spec: PolicySpec) -> Any:
        stats, where = config.given_stats(self.model_dir, read_config_json(self.model_dir) or {},
                                          f"policy.model_path {config.model_path!r}")
        if stats is None:
            # With init_from, the checkpoint's norm_stats.json (every save_pretrained writes one) replaces these
            # before any use, and describe() then names where they came from: nothing to warn of.
            if not config.init_from:
                warnings.warn(f"policy.type={config.type}: {config.model_path} carries no normalization statistics, so "
                              "actions are normalized by the env's action bounds and states are not normalized; SFT "
                              "computes them from its demonstrations (policy.norm_stats gives them)", stacklevel=2)
            return self.bounds_stats(spec)
        stats.check(self.state_dim, spec.action_dim, where)
        return stats

    def bounds_stats(self, spec: PolicySpec) -> Any:
        """The statistics of the env's action bounds (states unnormalised), when none are given."""
        return NormStats.from_bounds(spec.action_low, spec.action_high, self.state_dim)

    def set_stats(self, stats: NormStats) -> None:
        """Use these normalization statistics (buffers, so weight sync and checkpoints carry them)."""
        device = self.state_mean.device
        for name in ("state_mean", "state_std", "action_mean", "action_std"):
            setattr(self, name, torch.tensor(getattr(stats, name), dtype=torch.float32, device=device))
        self.stats_source = stats.source

    def stats(self) -> NormStats:
        return NormStats(self.state_mean.tolist(), self.state_std.tolist(), self.action_mean.tolist(),
                         self.action_std.tolist(), self.stats_source)

    def freeze(self) -> None:
        model = self.model
        if getattr(model.model.dit, "embed_tokens", None) is not None:
            model.model.dit.embed_tokens.requires_grad_(False)  # π0 never reads it: nothing to train or sync
        if self.config.freeze_vlm:  # the value head then reads a fixed prefix (RLinf's detach_critic_input)
            model.model.vlm.requires_grad_(False)
        if self.config.freeze_vision:
            model.model.vlm.vision_tower.requires_grad_(False)
            model.model.vlm.multi_modal_projector.requires_grad_(False)

    def lora_targets(self) -> tuple[str, list[str]]:
        """The VLM's language model and the expert (attention and MLP projections); the projections trained whole."""
        return LORA_TARGETS, PROJECTIONS

    def checkpointing_root(self) -> Any:
        """The SigLIP tower only: checkpointing a VLM or expert layer recomputes it in backward, and the recompute
        appends to the shared KV cache a second time."""
        return self.model.model.vlm.vision_tower

    def describe(self) -> str:
        split = parameter_split(self.model)
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.parameters())
        return (f"policy: {type(self).__name__} ({self.source} {self.config.model_noun} from {self.model_dir}), "
                f"{total / 1e6:.3f}M parameters: VLM "
                f"{split['vlm'] / 1e6:.3f}M, action expert {split['dit'] / 1e6:.3f}M (of which "
                f"{split['dit_unused_embed'] / 1e6:.3f}M unused embed_tokens, frozen), projections "
                f"{split['projections'] / 1e6:.3f}M; {trainable / 1e6:.3f}M trainable{self.describe_training()}; chunk "
                f"{self.chunk}/{self.chunk_size}, {self.steps} Euler steps, log-probs {self.logprob.name}; "
                f"cameras {', '.join(self.cameras)}; prompt of {self.inputs.max_length} tokens; "
                f"statistics from {self.stats_source}")

    # -- the policy interface ----------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = False, noise: torch.Tensor | None = None) -> PolicyOutput:
        """A chunk per env; ``noise`` [B, chunk_size, max_action_dim] is the flow's initial noise (drawn when None;
        given by checks against another implementation on the same noise)."""
        inputs = self.forward_inputs(obs)
        prefix = self._prefix(inputs)
        if noise is None:
            noise = rng.randn((prefix.mask.shape[0], self.chunk_size, self.max_action_dim), self.device_)
        noise = noise.to(self.device_, torch.float32)
        chain = sample_chain(self._velocity(prefix), noise, self.steps, self.logprob, deterministic, self.scored)
        inputs |= {k: v.detach().cpu() for k, v in chain.record.items()}
        return PolicyOutput(actions=self.env_actions(chain.actions).cpu(),
                            logprobs=chain.logprobs[:, :self.chunk].float().cpu(),
                            values=self._value(prefix).cpu(), forward_inputs=inputs)

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        prefix = self._prefix(forward_inputs)
        values = self._value(prefix)
        replay = {k: v.to(self.device_) for k, v in forward_inputs.items() if k in (CHAIN, STEP)}
        logp, entropy = score_chain(self._velocity(prefix), replay, self.steps, self.logprob, self.scored)
        return logp[:, :self.chunk], entropy[:, :self.chunk], values

    @torch.no_grad()
    def value(self, obs: Obs) -> torch.Tensor:
        return self._value(self._prefix(self.forward_inputs(obs))).cpu()

    def flow_feature_size(self) -> int:
        """F of ``steer(obs).features``: the VLM's hidden size plus the states used."""
        return int(self.model.config.vlm_config.text_config.hidden_size) + self.state_dim

    @torch.no_grad()
    def steer(self, obs: Obs) -> NoiseSteering:
        """DSRL: the VLM prefix over ``obs`` once; its features (what the value head reads: the masked mean of the
        prefix's last hidden states, and the normalized state when the policy uses states) and the ODE from a given
        noise [B, action_chunk, A]. The rest of π0's noise (the padded action dimensions, the positions past
        ``action_chunk``) is 0, the mode of its N(0, I) prior: the chunk is then a function of the steered noise
        alone, as the critics assume, and 0 is where π0's greedy loop is most likely to start."""
        prefix = self._prefix(self.forward_inputs(obs))
        features = torch.cat([self._pooled(prefix), prefix.state.float()[:, :self.state_dim]], -1)

        @torch.no_grad()
        def actions(noise: torch.Tensor) -> torch.Tensor:
            full = torch.zeros(noise.shape[0], self.chunk_size, self.max_action_dim, device=self.device_)
            full[:, :self.chunk, :self.action_dim] = noise.to(self.device_, torch.float32)
            chain = sample_chain(self._velocity(prefix), full, self.steps, self.logprob, True, self.scored)
            return self.env_actions(chain.actions).cpu()

        return NoiseSteering(features.cpu(), actions)

    def supervised_loss(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor,
                        executed: torch.Tensor) -> torch.Tensor:
        """π0's flow-matching objective (``forward(actions=...)``, its time sampling and velocity) on
        demonstrated chunks, averaged over the executed chunk positions and the env's action dimensions
        (the padded ones and the positions past ``action_chunk`` are masked out)."""
        dev = self.device_
        executed = executed.to(dev)
        # Past an episode's end the demonstration has no action: zeros (normalized), not whatever the dataset holds,
        # since the expert's action tokens attend to each other.
        target = self.model_actions(actions.to(dev) * executed[..., None]) * \
            torch.nn.functional.pad(executed, (0, self.chunk_size - executed.shape[1]))[..., None]
        noise = torch.randn_like(target)
        out = self.model(state=self._state(forward_inputs), noise=noise.to(self.dtype_),
                         actions=target.to(self.dtype_), **self._prompt_inputs(forward_inputs))
        error = (out.logits.float() - (noise - target)).pow(2)  # [B, chunk_size, max_action_dim]
        weight = torch.zeros_like(error)
        weight[:, :executed.shape[1], :self.action_dim] = executed.float()[..., None]
        return (error * weight).sum() / weight.sum().clamp_min(1.0)

    def fit_statistics(self, batches: Any) -> None:
        """Demonstrations' state and action mean/std, when the model came without statistics (its
        env-bounds stand-ins are replaced); a checkpoint's own statistics are kept."""
        if self.stats_source != "env bounds":
            return
        states, actions = [], []
        for forward_inputs, chunk, executed in batches:
            if self.state_dim:
                states.append(torch.as_tensor(forward_inputs[STATES]).float())
            actions.append(torch.as_tensor(chunk).float()[torch.as_tensor(executed).bool()])
        self.set_stats(self.fitted_stats(torch.cat(states) if states else None, torch.cat(actions)))

    def fitted_stats(self, states: torch.Tensor | None, actions: torch.Tensor) -> Any:
        """The statistics ``fit_statistics`` sets: mean/std here (π0.5 fits its own mode's)."""
        return fitted_stats(states, actions, self.state_dim)

    # -- inputs and outputs ------------------------------------------------------------------

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """What ``evaluate`` replays: prompt ids, uint8 images and the raw state (CPU)."""
        prompt = self.prompt(obs)
        inputs = {"input_ids": prompt.input_ids, "attention_mask": prompt.attention_mask}
        inputs |= {camera: self.uint8_images(obs[camera]) for camera in self.cameras}
        if self.state_dim:
            inputs[STATES] = torch.as_tensor(np.asarray(obs[STATES]), dtype=torch.float32)
        return inputs

    def prompt(self, obs: Obs) -> Any:
        """The prompt's ids and mask for ``obs`` (π0: the instructions alone)."""
        return self.inputs.prompts(self.instructions(obs))

    def _prompt_inputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask``, ``pixel_values``, ``pixel_attention_mask`` on the device."""
        images = [inputs[camera] for camera in self.cameras]
        return {"input_ids": inputs["input_ids"].to(self.device_),
                "attention_mask": inputs["attention_mask"].to(self.device_),
                **self.inputs.pixels(images, self.device_, self.dtype_)}

    def _state(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The normalized state, zero-padded to ``max_state_dim`` [B, S_max] (zeros without states)."""
        batch = inputs["input_ids"].shape[0]
        padded = torch.zeros(batch, self.max_state_dim, device=self.device_)
        if self.state_dim:
            s = inputs[STATES].to(self.device_).float()
            padded[:, :self.state_dim] = (s - self.state_mean) / (self.state_std + STD_EPS)
        return padded.to(self.dtype_)

    def model_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions [B, C, A] -> normalized, zero-padded to the model's chunk [B, chunk_size, max_action_dim]."""
        out = torch.zeros(actions.shape[0], self.chunk_size, self.max_action_dim, device=actions.device)
        out[:, :actions.shape[1], :self.action_dim] = (actions.float() - self.action_mean) / (self.action_std + STD_EPS)
        return out

    def env_actions(self, x: torch.Tensor) -> torch.Tensor:
        """The model's chunk [B, chunk_size, max_action_dim] -> the executed env actions [B, C, A]."""
        x = x[:, :self.chunk, :self.action_dim].float()
        return x * (self.action_std + STD_EPS) + self.action_mean

    def _prefix(self, inputs: dict[str, torch.Tensor]) -> Prefix:
        """The VLM over images and prompt, with its cache (as ``sample_actions`` builds it)."""
        p = self._prompt_inputs(inputs)
        inner = self.model.model
        embeds = inner.embed_prefix(p["input_ids"], p["pixel_values"], p["pixel_attention_mask"])
        mask = p["attention_mask"]
        out = inner.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                        token_type_ids=torch.zeros_like(embeds)[:, :, 0], use_cache=True)
        return Prefix(out.cache, out.last_hidden_state, mask, self._state(inputs), out.cache.get_seq_length())

    def _velocity(self, prefix: Prefix) -> Velocity:
        """The action expert over the prefix cache, as ``flow_logprob`` calls it."""
        def velocity(x: torch.Tensor, t: torch.Tensor, repeats: int) -> tuple[torch.Tensor, torch.Tensor]:
            mask, state = prefix.mask, prefix.state
            if repeats > 1:  # one batched replay: the cache is used once more, so it may grow in place
                prefix.cache.batch_repeat_interleave(repeats)
                mask, state = mask.repeat_interleave(repeats, 0), state.repeat_interleave(repeats, 0)
            embeds = self.model.embed_action_time(state, x.to(self.dtype_), t.float())
            out = self.model.model(action_embeds=embeds, attention_mask=mask, cache=prefix.cache)
            prefix.cache.crop(prefix.length - prefix.cache.get_seq_length())  # back to the prefix alone
            features = out.last_hidden_state[:, -self.chunk_size:]
            return self.model.action_out_proj(features).float(), features
        return velocity

    def _pooled(self, prefix: Prefix) -> torch.Tensor:
        """The masked mean of the prefix's last hidden states [B, H] (float32)."""
        mask = prefix.mask.float()[..., None]
        return (prefix.hidden.float() * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    def _value(self, prefix: Prefix) -> torch.Tensor:
        return self.value_head(torch.cat([self._pooled(prefix), prefix.state.float()], -1)).squeeze(-1)

    # -- checkpoints: the base's folder layout (the model itself or adapter/, heads.pt, embodied_policy.json) ----

    def head_modules(self) -> dict[str, nn.Module]:
        """The value head and Flow-Noise's std head."""
        heads: dict[str, nn.Module] = {"value_head": self.value_head}
        if hasattr(self, "noise_std"):
            heads["noise_std"] = self.noise_std
        return heads

    def save_own_files(self, out: Path) -> None:
        """``norm_stats.json`` and ``processor_config.json`` (so the folder acts the same outside this code)."""
        stats = self.stats()
        stats.save(out)
        (out / PROCESSOR_FILE).write_text(json.dumps(self.processor_settings(stats), indent=2))

    def load_own_files(self, src: Path) -> None:
        stats = folder_stats(src)
        if stats is not None:
            stats.check(self.state_dim, self.action_dim, f"checkpoint {src}")
            self.set_stats(stats)

    def policy_meta(self) -> dict[str, Any]:
        return {"source": self.source, "steps": self.steps, "chunk_size": self.chunk_size}

    def processor_settings(self, stats: NormStats) -> dict[str, Any]:
        """What turns an env's observation into this π0's inputs, for ``processor_config.json``: PI0Processor's
        statistics (``state_mean`` ... ``actions_std``, so ``PI0Processor.from_pretrained`` normalizes as we do) and
        the rest of our pipeline (prompt length, cameras in the model's order, executed actions, resize), so the
        folder acts the same outside this code (``docs/pretrained_vla.md``)."""
        return {"processor_class": "PI0Processor", "state_mean": stats.state_mean, "state_std": stats.state_std,
                "actions_mean": stats.action_mean, "actions_std": stats.action_std,
                "max_state_dim": self.max_state_dim, "chunk_size": self.chunk_size,
                "embodied": {"tokenizer_max_length": self.inputs.max_length, "cameras": self.cameras,
                             "n_action_steps": self.chunk, "num_inference_steps": self.steps,
                             "instruction": "newline appended when missing, <bos> first, truncated, right-padded",
                             "resize": "LeRobot resize_with_pad_torch: sizes truncated, bilinear without "
                                       "antialiasing, centred on black; pixels x / 255 * 2 - 1"}}

"""``TransformersPolicy``: the machinery every transformers-backed policy shares, written once.

A subclass (``VLAPolicy``, ``PI0Policy``) builds its transformers model, tokenizer and heads between the base's
``__init__`` and :meth:`TransformersPolicy.setup_training`, and implements ``act`` / ``evaluate`` / ``value`` /
``forward_inputs``; the package docstring (``policies/transformers_base/__init__.py``) has a worked example.

What the base does:

- **device and dtype**: ``device_`` (``policy.device``; ``auto`` is cuda when present), ``dtype_``.
- **the model folder**: ``model_dir``, ``policy.model_path`` resolved by the subclass (``tiny:NAME`` built once
  into the cache, ``folders.py``), and the tokenizer (``folders.load_tokenizer``).
- **training setup** (:meth:`setup_training`): the subclass's freezing (:meth:`freeze`), LoRA through peft on the
  modules :meth:`lora_targets` names (the peft wrapper is kept in ``_peft``, out of the module tree: its weights
  are the model's), activation checkpointing of the layers under :meth:`checkpointing_root`, the model in eval
  mode (no dropout: ``act`` and ``evaluate`` agree) with the checkpointed layers' own flag on (transformers
  recomputes a layer only in training mode), and the whole policy on its device.
- **FSDP units**: the model's transformer layers (``GradientCheckpointingLayer``), each sharded on its own.
- **the checkpoint folder** (:meth:`save_pretrained` / :meth:`load_pretrained`): the whole model and its tokenizer
  as transformers writes them (at ``model_folder``), or under LoRA peft's ``adapter/``; ``heads.pt`` (the
  :meth:`head_modules`' state dicts); ``embodied_policy.json`` (the config, the base model and
  :meth:`policy_meta`); the subclass's own files through :meth:`save_own_files` / :meth:`load_own_files`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from embodied.core.types import TASK_DESCRIPTIONS, Obs
from embodied.policies.transformers_base.configuration import TransformersPolicyConfig
from embodied.policies.transformers_base.folders import quiet_transformers
from embodied.policy.base import Policy, PolicySpec

HEADS_FILE = "heads.pt"  # the policy's own modules around the model (value head, action heads ...): a plain state dict
POLICY_FILE = "embodied_policy.json"  # the policy config and the base model, for people and tools
ADAPTER_DIR = "adapter"  # peft's save_pretrained folder under LoRA
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """``policy.device`` as a torch device (``auto``: cuda when present); cuda without one is refused."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("policy.device: 'cuda' but torch sees no CUDA device here (use cpu or auto)")
    return torch.device(name)


class TransformersPolicy(Policy):
    """A policy around one transformers model (see the module docstring for what the base does)."""

    exports_pretrained = True
    model_attribute: ClassVar[str] = "model"  # the attribute holding the transformers model (its state-dict prefix)
    model_folder: ClassVar[str] = ""  # where save_pretrained writes the whole model: "" is the folder itself
    optional_heads: ClassVar[tuple[str, ...]] = ()  # head modules a checkpoint may lack (they start fresh)
    lora_field: ClassVar[str] = "policy.lora_rank"  # the field named when peft refuses the LoRA targets
    checkpointing_scope: ClassVar[str] = "the model's {n} layers"  # describe(): which layers are recomputed

    def __init__(self, config: TransformersPolicyConfig, spec: PolicySpec, model_dir: Path) -> None:
        super().__init__()
        quiet_transformers()
        if spec.image_shape is None:
            raise ValueError(f"policy.type={config.type} needs images: set env.obs_mode to 'rgb' or 'state+rgb'")
        self.config, self.spec = config, spec
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        self.device_ = resolve_device(config.device)
        self.dtype_ = DTYPES[config.dtype]
        self.model_dir = model_dir
        self._peft: list[Any] = []  # the peft wrapper, kept out of the module tree (its weights are the model's)
        self._checkpointed: list[nn.Module] = []

    @property
    def pretrained_model(self) -> Any:
        """The transformers model (``self.backbone`` of the VLA, ``self.model`` of π0)."""
        return getattr(self, self.model_attribute)

    # -- hooks a subclass implements (or keeps) -------------------------------------------------

    def head_modules(self) -> dict[str, nn.Module]:
        """The modules saved in ``heads.pt`` by name (the value head and whatever else is the policy's own)."""
        raise NotImplementedError

    def lora_targets(self) -> tuple[Any, list[str] | None]:
        """(peft ``target_modules``: names or a regex, ``modules_to_save``: trained whole) for ``policy.lora_rank``."""
        raise NotImplementedError

    def freeze(self) -> None:
        """What the policy's config keeps fixed, before LoRA is added (the default freezes nothing)."""

    def checkpointing_root(self) -> Any:
        """The transformers module whose layers ``policy.gradient_checkpointing`` recomputes (the whole model)."""
        return self.pretrained_model

    def policy_meta(self) -> dict[str, Any]:
        """What ``embodied_policy.json`` holds beside the config and the base model."""
        return {}

    def save_own_files(self, out: Path) -> None:
        """Write the policy's own files beside the model and ``heads.pt`` (statistics, tokenizers ...)."""

    def load_own_files(self, src: Path) -> None:
        """Read (and check) what :meth:`save_own_files` wrote, before any weight is loaded."""

    def saved_head_state(self, name: str, module: nn.Module, saved: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The state dict a head loads from what ``heads.pt`` holds for it (as saved, by default)."""
        return saved

    def make_value_head(self, features: int) -> nn.Module:
        """The value head over ``features`` inputs: a hidden layer of ``policy.value_hidden`` (tanh), one output."""
        return nn.Sequential(nn.Linear(features, self.config.value_hidden), nn.Tanh(),
                             nn.Linear(self.config.value_hidden, 1))

    # -- training setup ---------------------------------------------------------------------------

    def setup_training(self) -> None:
        """Freezing, LoRA, activation checkpointing, eval mode, the device: the end of a subclass's ``__init__``."""
        self.freeze()
        if self.config.lora_rank > 0:
            self._add_lora()
        if self.config.gradient_checkpointing:
            self._checkpointed = self._enable_checkpointing()
        self.pretrained_model.eval()  # no dropout anywhere in the model: act and evaluate must agree
        self._keep_checkpointing()
        self.to(self.device_)

    def _add_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        targets, whole = self.lora_targets()
        lora = LoraConfig(r=self.config.lora_rank, lora_alpha=self.config.lora_alpha, lora_dropout=0.0,
                          target_modules=targets, modules_to_save=whole, bias="none")
        try:
            with warnings.catch_warnings():  # peft asks transformers a deprecated question; not ours to fix
                warnings.simplefilter("ignore", FutureWarning)
                self._peft = [get_peft_model(self.pretrained_model, lora)]
        except ValueError as exc:
            raise ValueError(f"{self.lora_field}: {exc}") from None
        # get_peft_model froze everything else; the LoRA matrices (and modules_to_save) are what trains of the model.

    def _enable_checkpointing(self) -> list[nn.Module]:
        """transformers' checkpointing of each layer under ``checkpointing_root()``; the layers it wraps."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        root = self.checkpointing_root()
        if not getattr(root, "supports_gradient_checkpointing", False):
            raise ValueError(f"policy.gradient_checkpointing: {type(root).__name__} does not support "
                             "gradient checkpointing (transformers' supports_gradient_checkpointing is False)")
        root.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        return [m for m in root.modules() if isinstance(m, GradientCheckpointingLayer)]

    def _keep_checkpointing(self) -> None:
        # transformers checkpoints a layer only while it is in training mode. Only the layer's own flag is set:
        # its submodules (dropout, attention) stay in eval mode, so act and evaluate still agree.
        for layer in self._checkpointed:
            layer.training = True

    def train(self, mode: bool = True) -> TransformersPolicy:
        super().train(mode)
        self.pretrained_model.eval()  # dropout stays off (see setup_training)
        self._keep_checkpointing()
        return self

    def fsdp_units(self) -> list[nn.Module]:
        """The model's transformer layers (language model, vision encoder, action expert), each sharded alone."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        return [m for m in self.pretrained_model.modules() if isinstance(m, GradientCheckpointingLayer)]

    def describe_training(self) -> str:
        """``, LoRA r=R`` and which layers activation checkpointing recomputes, for ``describe()``."""
        text = f", LoRA r={self.config.lora_rank}" if self._peft else ""
        if self._checkpointed:
            text += f"; activation checkpointing: {self.checkpointing_scope.format(n=len(self._checkpointed))}"
        return text

    def flow_noise_shape(self) -> tuple[int, int]:
        """The part of the flow's initial noise that DSRL steers: the executed chunk and the env's action
        dimensions [action_chunk, A] (policies whose config has ``flow_noise()``)."""
        return self.chunk, self.action_dim

    # -- inputs -----------------------------------------------------------------------------------

    def instructions(self, obs: Obs) -> list[str]:
        """The task description of every env, which the prompt holds; none (or an empty one) is refused."""
        descriptions = obs.get(TASK_DESCRIPTIONS)
        if descriptions is None or len(descriptions) == 0 or any(not d for d in descriptions):
            raise ValueError(f"policy.type={self.config.type} reads an instruction per env from "
                             "obs['task_descriptions'], and the env gave none (or an empty one): give the env a "
                             "task_description")
        return list(descriptions)

    def uint8_images(self, images: Any) -> torch.Tensor:
        """A camera's images as a uint8 tensor [B, H, W, 3] (what forward_inputs keep; never float pixels)."""
        x = torch.as_tensor(np.asarray(images))
        if x.dtype != torch.uint8:
            raise ValueError(f"policy.type={self.config.type} expects uint8 images [B, H, W, 3], got {x.dtype}")
        return x

    # -- checkpoints ------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path) -> None:
        """A folder transformers (and peft) open alone, plus this policy's own parts: the whole model and its
        tokenizer (``save_pretrained``, at ``model_folder``) or, under LoRA, ``adapter/`` (peft's: open it with
        ``PeftModel.from_pretrained(<model class>.from_pretrained(base), adapter)``); ``heads.pt``; the
        subclass's own files; ``embodied_policy.json``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if self._peft:
            self._peft[0].save_pretrained(out / ADAPTER_DIR)
        else:
            self.pretrained_model.save_pretrained(out / self.model_folder)
            self.tokenizer.save_pretrained(out / self.model_folder)
        torch.save({name: m.state_dict() for name, m in self.head_modules().items()}, out / HEADS_FILE)
        self.save_own_files(out)
        meta = {"config": asdict(self.config), "base_model": str(self.model_dir)} | self.policy_meta()
        (out / POLICY_FILE).write_text(json.dumps(meta, indent=2))

    def load_pretrained(self, directory: str | Path) -> None:
        """Load what ``save_pretrained`` wrote into this policy (built from the same config)."""
        src = Path(directory)
        self.load_own_files(src)
        self._load_model_weights(src)
        heads = torch.load(src / HEADS_FILE, map_location=self.device_, weights_only=True)
        modules = self.head_modules()
        missing = [name for name in modules if name not in heads and name not in self.optional_heads]
        if missing:
            raise ValueError(f"checkpoint {src}/{HEADS_FILE} lacks {missing} (another action head or state input?)")
        for name, module in modules.items():
            if name in heads:  # an optional head a checkpoint lacks starts fresh
                module.load_state_dict(self.saved_head_state(name, module, heads[name]))

    def _load_model_weights(self, src: Path) -> None:
        noun = self.config.model_noun
        whole = src / self.model_folder
        if (src / ADAPTER_DIR).is_dir():
            if not self._peft:
                raise ValueError(f"checkpoint {src} holds a LoRA adapter but policy.lora_rank is 0")
            from peft.utils import set_peft_model_state_dict
            from safetensors.torch import load_file

            weights = load_file(str(src / ADAPTER_DIR / "adapter_model.safetensors"), device=str(self.device_))
            set_peft_model_state_dict(self._peft[0], weights)
        elif (whole / "config.json").is_file():
            if self._peft:
                raise FileNotFoundError(f"checkpoint {src} has no LoRA {ADAPTER_DIR}/ (a fully trained {noun}?) but "
                                        f"policy.lora_rank is {self.config.lora_rank}")
            trained = type(self.pretrained_model).from_pretrained(whole, dtype=self.dtype_)
            self.pretrained_model.load_state_dict(trained.state_dict())
        else:
            held = f"{self.model_folder}/" if self.model_folder else "config.json"
            raise FileNotFoundError(f"checkpoint {src} holds no {noun} (neither {held} nor {ADAPTER_DIR}/)")

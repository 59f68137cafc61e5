"""Configuration of the VLA policy (``policy.type: vla``).

The backbone is any transformers image-text-to-text model in a local folder (``model_path``,
read by ``AutoModelForImageTextToText.from_pretrained``) or a named tiny one (``tiny:smolvlm-tiny``,
``tiny:qwen2_5_vl-tiny``, ``tiny:paligemma-tiny``) built offline on first use. Three families have
prompt and image code: SmolVLM / Idefics3, PaliGemma (π0's backbone) and Qwen2-VL / Qwen2.5-VL / Qwen3-VL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from embodied.policies.transformers_base.configuration import TINY_PREFIX, TransformersPolicyConfig

__all__ = ["TINY_NAMES", "TINY_PREFIX", "VLAConfig", "model_dir_problems"]
TINY_NAMES = ("smolvlm-tiny", "qwen2_5_vl-tiny", "paligemma-tiny")


@dataclass
class VLAConfig(TransformersPolicyConfig):
    """The VLA's own fields; device, dtype, LoRA, the value head, checkpointing, the cameras and states and the
    flow log-prob fields are ``TransformersPolicyConfig``'s."""

    type: str = "vla"  # registered policy name
    model_path: str = "tiny:smolvlm-tiny"  # (TransformersPolicyConfig's field) default: the tiny SmolVLM
    use_states: bool = False  # (TransformersPolicyConfig's field) as one projected token (a learned linear map)
    flow_logprob: Literal["sde", "noise"] = "sde"  # (TransformersPolicyConfig's field) flow head under RL: Flow-SDE by default
    action_head: Literal["tokens", "autoregressive", "gaussian", "flow"] = "tokens"  # how actions come out (see heads.py, flow.py)
    action_bins: int | None = None  # token heads: uniform bins over [-1, 1] per action dimension, the last ids of the vocabulary (null: 256)
    action_norm: Literal["env_bounds", "model_stats"] = "env_bounds"  # [-1, 1] <-> env actions: the action space's bounds, or q01/q99 of <model_path>/action_stats.json
    image_size: int | None = None  # pixels per side the images are resized to (null: the family's default)
    max_instruction_tokens: int = 32  # instruction tokens kept in the fixed-length prompt (longer is an error)
    instruction_template: str = "{task}"  # the instruction as the prompt writes it; {task} is the env's task (e.g. π0.5's "Task: {task}, State: ;\nAction: ")
    temperature: float = 1.0  # sampling temperature of the token heads during training (eval is greedy)
    init_log_std: float = -1.0  # gaussian head: initial log standard deviation (normalized action units)
    flow_steps: int = 10  # flow head: Euler denoising steps per chunk (πRL trains with 3-4)
    flow_width: int = 256  # flow head: the action expert's width
    flow_depth: int = 4  # flow head: the action expert's layers (each cross-attends to a backbone layer)
    flow_heads: int = 4  # flow head: attention heads of the action expert (divides flow_width)
    lora_target_modules: list[str] | None = None  # module name suffixes LoRA wraps (null: the family's attention and MLP projections of the language model)
    freeze_backbone: bool = False  # only the action head, value head and state projection train (RLinf's train_expert_only for π0 under PPO)

    model_class: ClassVar[str] = "embodied.policies.vla.modeling:VLAPolicy"
    # flow_logprob is not one: an SFT checkpoint (no noise head) starts Flow-Noise RL with a fresh noise head.
    architecture_fields: ClassVar[tuple[str, ...]] = ("action_head", "use_states", "flow_width", "flow_depth",
                                                      "flow_heads")
    tiny_names: ClassVar[tuple[str, ...]] = TINY_NAMES
    make_tiny: ClassVar[str] = "embodied.policies.vla.tiny:make_tiny"
    model_noun: ClassVar[str] = "backbone"

    @property
    def bins(self) -> int:
        """Action bins of the token heads (and of the action tokenizer's normalization for the others)."""
        return 256 if self.action_bins is None else self.action_bins

    def flow_noise(self) -> bool:
        """Only the flow head starts its chunks from a noise (DSRL steers it)."""
        return self.action_head == "flow"

    def folder_problems(self, path: Path) -> list[str]:
        return model_dir_problems(path, self.action_norm)

    def validate(self) -> list[str]:
        """The shared checks (the folder's files, LoRA, the device, the flow log-prob fields), then the VLA's."""
        p = super().validate()
        if not 2 <= self.bins <= 4096:
            p.append(f"policy.action_bins: must be in [2, 4096], got {self.action_bins}")
        p += self._flow_problems()
        if self.image_size is not None and self.image_size < 8:
            p.append(f"policy.image_size: must be >= 8 pixels, got {self.image_size}")
        if self.max_instruction_tokens < 1:
            p.append(f"policy.max_instruction_tokens: must be >= 1, got {self.max_instruction_tokens}")
        try:
            self.instruction_template.format(task="")
            if "{task}" not in self.instruction_template:
                p.append(f"policy.instruction_template: {self.instruction_template!r} never writes the task "
                         "({task})")
        except (KeyError, IndexError, ValueError) as exc:
            p.append(f"policy.instruction_template: {self.instruction_template!r} is not a template with {{task}} "
                     f"as its only field ({type(exc).__name__}: {exc}); write literal braces as {{{{ and }}}}")
        if not self.temperature > 0:
            p.append(f"policy.temperature: must be > 0, got {self.temperature}")
        if self.freeze_backbone and self.lora_rank > 0:
            p.append(f"policy.freeze_backbone: the backbone is frozen, so its LoRA adapters (policy.lora_rank="
                     f"{self.lora_rank}) would never train; set lora_rank to 0 or freeze_backbone to false")
        if self.freeze_backbone and self.action_head in ("tokens", "autoregressive"):
            p.append(f"policy.freeze_backbone: action_head={self.action_head} reads its actions from the backbone's "
                     "LM head, so a frozen backbone leaves its actions nothing to train (use gaussian or flow)")
        if self.lora_target_modules is not None and self.lora_rank == 0:
            p.append("policy.lora_target_modules: set, but policy.lora_rank is 0 (LoRA off)")
        return p

    def _flow_problems(self) -> list[str]:
        """The flow head's own fields (its log-prob fields are checked by the base)."""
        p: list[str] = []
        if self.action_head != "flow":
            return p
        if self.action_bins is not None:
            p.append("policy.action_bins: only the token heads have bins; action_head=flow predicts continuous "
                     "actions (remove action_bins)")
        if self.temperature != 1.0:
            p.append("policy.temperature: only the token heads sample with a temperature; action_head=flow draws "
                     "its noise from flow_logprob (flow_noise_level / flow_noise_std_*)")
        if self.flow_steps < 1:
            p.append(f"policy.flow_steps: must be >= 1 Euler step, got {self.flow_steps}")
        if self.flow_width < 1 or self.flow_depth < 1 or self.flow_heads < 1 or self.flow_width % self.flow_heads:
            p.append(f"policy.flow_width / flow_depth / flow_heads: need positive sizes with flow_heads dividing "
                     f"flow_width, got {self.flow_width} / {self.flow_depth} / {self.flow_heads}")
        return p


def model_dir_problems(path: Path, action_norm: str) -> list[str]:
    """What a model folder lacks for ``from_pretrained``: config, tokenizer, (action statistics)."""
    where = f"policy.model_path: {str(path)!r}"
    if not path.is_dir():
        return [f"{where} is not a folder (a folder written by save_pretrained, or tiny:NAME)"]
    p = []
    if not (path / "config.json").is_file():
        p.append(f"{where} has no config.json (not a save_pretrained folder?)")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        p.append(f"{where} has no tokenizer (tokenizer.json / tokenizer_config.json); save the tokenizer beside the model")
    if action_norm == "model_stats" and not (path / "action_stats.json").is_file():
        p.append(f"{where} has no action_stats.json, which policy.action_norm=model_stats reads "
                 "(q01/q99 per action dimension; or use policy.action_norm=env_bounds)")
    return p

"""Configuration of the VLA policy (``policy.type: vla``).

The backbone is any transformers image-text-to-text model in a local folder (``model_path``,
read by ``AutoModelForImageTextToText.from_pretrained``) or a named tiny one (``tiny:smolvlm-tiny``,
``tiny:qwen2_5_vl-tiny``) built offline on first use. Two families have prompt and image code:
SmolVLM / Idefics3 and Qwen2-VL / Qwen2.5-VL / Qwen3-VL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from embodied.policy import PolicyConfig

TINY_PREFIX = "tiny:"
TINY_NAMES = ("smolvlm-tiny", "qwen2_5_vl-tiny")


@dataclass
class VLAConfig(PolicyConfig):
    type: str = "vla"  # registered policy name
    model_path: str = "tiny:smolvlm-tiny"  # local model folder, or tiny:NAME (built offline into the cache)
    action_head: Literal["tokens", "autoregressive", "gaussian"] = "tokens"  # how actions come out (see heads.py)
    action_bins: int = 256  # uniform bins over [-1, 1] per action dimension, the last ids of the vocabulary
    action_norm: Literal["env_bounds", "model_stats"] = "env_bounds"  # [-1, 1] <-> env actions: the action space's bounds, or q01/q99 of <model_path>/action_stats.json
    image_size: int | None = None  # pixels per side the images are resized to (null: the family's default)
    use_wrist_image: bool = True  # add the wrist camera image to the prompt when the env has one
    use_states: bool = False  # add the proprioceptive state as one projected token (a learned linear map)
    max_instruction_tokens: int = 32  # instruction tokens kept in the fixed-length prompt (longer is an error)
    temperature: float = 1.0  # sampling temperature of the token heads during training (eval is greedy)
    init_log_std: float = -1.0  # gaussian head: initial log standard deviation (normalized action units)
    value_hidden: int = 256  # width of the value head's hidden layer
    lora_rank: int = 0  # LoRA rank through peft; 0 trains the whole backbone
    lora_alpha: float = 16.0  # LoRA scaling numerator (scale = alpha / rank)
    lora_target_modules: list[str] | None = None  # module name suffixes LoRA wraps (null: the family's attention and MLP projections of the language model)
    device: Literal["cpu", "cuda", "auto"] = "cpu"  # where the rollout and actor copies run (auto: cuda when present)
    dtype: Literal["float32", "bfloat16"] = "float32"  # backbone weights and activations (heads stay float32)

    model_class: ClassVar[str] = "embodied.policies.vla.modeling:VLAPolicy"

    def required_observations(self) -> set[str]:
        return {"images", "states"} if self.use_states else {"images"}

    def validate(self) -> list[str]:
        """Checks that need no model: the folder's files, numeric ranges, the device."""
        p: list[str] = []
        if self.model_path.startswith(TINY_PREFIX):
            name = self.model_path[len(TINY_PREFIX):]
            if name not in TINY_NAMES:
                p.append(f"policy.model_path: unknown tiny backbone {name!r}; known: "
                         f"{', '.join(TINY_PREFIX + n for n in TINY_NAMES)}")
        else:
            p += model_dir_problems(Path(self.model_path).expanduser(), self.action_norm)
        if not 2 <= self.action_bins <= 4096:
            p.append(f"policy.action_bins: must be in [2, 4096], got {self.action_bins}")
        if self.image_size is not None and self.image_size < 8:
            p.append(f"policy.image_size: must be >= 8 pixels, got {self.image_size}")
        if self.max_instruction_tokens < 1:
            p.append(f"policy.max_instruction_tokens: must be >= 1, got {self.max_instruction_tokens}")
        if not self.temperature > 0:
            p.append(f"policy.temperature: must be > 0, got {self.temperature}")
        if self.lora_rank < 0:
            p.append(f"policy.lora_rank: must be >= 0 (0: no LoRA), got {self.lora_rank}")
        if self.lora_target_modules is not None and self.lora_rank == 0:
            p.append("policy.lora_target_modules: set, but policy.lora_rank is 0 (LoRA off)")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                p.append("policy.device: 'cuda' but torch sees no CUDA device here (use cpu or auto)")
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

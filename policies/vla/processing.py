"""Prompt + images -> backbone inputs, in torch (no transformers image processor, no torchvision).

Every prompt has one fixed length ``L`` (left-padded), so prompts of a rollout stack into
``[T, N, L]`` and replay exactly. The layout, per family:

- SmolVLM / Idefics3: ``<|im_start|>User:`` + per image ``<fake_token_around_image><global-img>``
  ``<image> x n <fake_token_around_image>`` + instruction (+ state token) + ``<end_of_utterance>\\nAssistant:``.
  Images are resized to the vision encoder's size (no image splitting), ``n = (S/patch)^2 / scale^2``.
- PaliGemma (π0 / π0.5's backbone): ``<image> x n`` per image + ``<bos>`` + instruction (+ state token)
  + ``\n``, as PaliGemma's processor lays it out. Images are resized to the SigLIP tower's size,
  ``n = (S/patch)^2``; positions start at 1 as PaliGemma's do. Attention stays causal (no
  ``token_type_ids``), so every head reads the same prefix as the value head.
- Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ``<|im_start|>user\\n`` + per image ``<|vision_start|><|image_pad|> x n``
  ``<|vision_end|>`` + instruction (+ state token) + ``<|im_end|>\\n<|im_start|>assistant\\n``. Images are
  resized to ``S`` (a multiple of patch x merge), patchified as Qwen's processor does, with
  ``image_grid_thw``; 3-D rope positions come from the model's own ``get_rope_index``.

The state token (``policy.use_states``) is a pad id in ``input_ids`` whose embedding the policy
replaces by a learned projection of the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

FAMILIES = {"idefics3": "smolvlm", "smolvlm": "smolvlm", "qwen2_vl": "qwen", "qwen2_5_vl": "qwen", "qwen3_vl": "qwen",
            "paligemma": "paligemma"}
DEFAULT_MEAN_STD = {
    "smolvlm": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "paligemma": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "qwen": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
}


def family_of(model_config: Any) -> str:
    """``smolvlm``, ``paligemma`` or ``qwen``, from the backbone config's ``model_type``."""
    model_type = getattr(model_config, "model_type", "?")
    if model_type not in FAMILIES:
        raise ValueError(f"policy.model_path: backbone model_type {model_type!r} has no prompt/image code; "
                         f"supported: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


@dataclass
class Prompt:
    """Token ids of a batch of prompts, left-padded to one length."""

    input_ids: torch.Tensor  # int64 [B, L]
    attention_mask: torch.Tensor  # int64 [B, L], 0 on padding


class VLAProcessor:
    """Builds fixed-length prompts and the backbone's pixel inputs from uint8 images."""

    def __init__(self, tokenizer: Any, model_config: Any, model_dir: Path, *, image_size: int | None,
                 env_image_size: int, num_images: int, use_states: bool, max_instruction_tokens: int,
                 instruction_template: str) -> None:
        self.family = family_of(model_config)
        self.config = model_config
        self.num_images, self.use_states = num_images, use_states
        self.max_instruction_tokens = max_instruction_tokens
        self.instruction_template = instruction_template
        self.pad_id = _pad_id(tokenizer)
        self.tokenizer = tokenizer
        vision = model_config.vision_config
        if self.family == "smolvlm":
            self.patch, self.merge = int(vision.patch_size), int(model_config.scale_factor)
            self.image_size = int(image_size or vision.image_size)
            if self.image_size > int(vision.image_size):
                raise ValueError(f"policy.image_size: {self.image_size} exceeds the vision encoder's "
                                 f"{vision.image_size} (images are not split into crops)")
        elif self.family == "paligemma":
            self.patch, self.merge = int(vision.patch_size), 1
            self.image_size = int(image_size or vision.image_size)
            if self.image_size != int(vision.image_size):
                raise ValueError(f"policy.image_size: PaliGemma's SigLIP tower takes {vision.image_size} pixels "
                                 f"per side (its position embeddings are fixed), got {self.image_size}")
        else:
            self.patch, self.merge = int(vision.patch_size), int(vision.spatial_merge_size)
            self.temporal = int(getattr(vision, "temporal_patch_size", 2))
            unit = self.patch * self.merge
            self.image_size = int(image_size or max(unit, -(-env_image_size // unit) * unit))
        unit = self.patch * self.merge
        if self.image_size % unit:
            raise ValueError(f"policy.image_size: {self.image_size} must be a multiple of patch x merge = {unit}")
        self.grid = self.image_size // self.patch  # patches per side
        self.tokens_per_image = (self.grid // self.merge) ** 2
        mean, std = _mean_std(model_dir, self.family)
        self.mean = torch.tensor(mean).view(1, 3, 1, 1)
        self.std = torch.tensor(std).view(1, 3, 1, 1)
        self.image_token_id = int(model_config.image_token_id)
        self._prefix, self._suffix = self._template()
        self.length = len(self._prefix) + max_instruction_tokens + int(use_states) + len(self._suffix)
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- prompts -----------------------------------------------------------------------------

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _special(self, token: str) -> int:
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == self.tokenizer.unk_token_id:
            raise ValueError(f"the tokenizer has no {token!r} token, which the {self.family} prompt needs")
        return int(token_id)

    def _template(self) -> tuple[list[int], list[int]]:
        """Token ids before the instruction (images included) and after it."""
        n = self.tokens_per_image
        if self.family == "smolvlm":
            fake, glob = self._special("<fake_token_around_image>"), self._special("<global-img>")
            image = [fake, glob] + [self.image_token_id] * n + [fake]
            prefix = [self._special("<|im_start|>")] + self._ids("User:") + image * self.num_images
            suffix = [self._special("<end_of_utterance>")] + self._ids("\nAssistant:")
        elif self.family == "paligemma":
            prefix = [self.image_token_id] * n * self.num_images + [self._special("<bos>")]
            suffix = self._ids("\n")
        else:
            start, end = self._special("<|vision_start|>"), self._special("<|vision_end|>")
            image = [start] + [self.image_token_id] * n + [end]
            im_start, im_end = self._special("<|im_start|>"), self._special("<|im_end|>")
            prefix = [im_start] + self._ids("user\n") + image * self.num_images
            suffix = [im_end] + self._ids("\n") + [im_start] + self._ids("assistant\n")
        return prefix, suffix

    def prompts(self, descriptions: list[str]) -> Prompt:
        """Left-padded prompts ``[B, L]`` for a batch of instructions (each distinct one built once)."""
        rows = [self._row(text) for text in descriptions]
        return Prompt(torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))

    def _row(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids [L], attention_mask [L])`` of one instruction, cached."""
        if text not in self._cache:
            written = self.instruction_template.format(task=text)
            ids = self._ids(written)
            if len(ids) > self.max_instruction_tokens:
                raise ValueError(f"policy.max_instruction_tokens: the instruction {written!r} is {len(ids)} tokens, "
                                 f"more than {self.max_instruction_tokens}; raise the limit")
            row = self._prefix + ids + [self.pad_id] * int(self.use_states) + self._suffix
            pad = self.length - len(row)
            self._cache[text] = (torch.tensor([self.pad_id] * pad + row, dtype=torch.long),
                                 torch.tensor([0] * pad + [1] * len(row), dtype=torch.long))
        return self._cache[text]

    @property
    def state_position(self) -> int:
        """Index of the state token in every prompt (counted from the end, so it is the same in all rows)."""
        return self.length - len(self._suffix) - 1

    # -- images ------------------------------------------------------------------------------

    def pixel_inputs(self, images: list[torch.Tensor], device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
        """Backbone keyword arguments for uint8 images ``[B, H, W, 3]`` (one tensor per camera)."""
        b = images[0].shape[0]
        x = torch.stack(images, 1).to(device)  # [B, I, H, W, 3] uint8
        x = x.reshape(-1, *x.shape[2:]).permute(0, 3, 1, 2).float().div_(255.0)  # [B*I, 3, H, W]
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False,
                              antialias=True)
        x = (x - self.mean.to(device)) / self.std.to(device)
        if self.family == "smolvlm":
            return {"pixel_values": x.view(b, self.num_images, 3, self.image_size, self.image_size).to(dtype)}
        if self.family == "paligemma":  # every image through SigLIP, in prompt order
            return {"pixel_values": x.to(dtype)}
        return {"pixel_values": self._patchify(x).to(dtype),
                "image_grid_thw": torch.tensor([[1, self.grid, self.grid]] * x.shape[0], device=device)}

    def _patchify(self, x: torch.Tensor) -> torch.Tensor:
        """[N, 3, S, S] -> [N * grid^2, 3 * T * patch^2] in Qwen's order (merge windows contiguous)."""
        n, c, g, m, p, t = x.shape[0], x.shape[1], self.grid, self.merge, self.patch, self.temporal
        x = x.reshape(n, c, g // m, m, p, g // m, m, p).permute(0, 2, 5, 3, 6, 1, 4, 7)  # n, gh, gw, mh, mw, c, p, p
        x = x.unsqueeze(6).expand(*x.shape[:6], t, p, p)  # the still image repeated over the temporal patch
        return x.reshape(n * g * g, c * t * p * p)

    # -- positions ---------------------------------------------------------------------------

    def positions(self, inner_model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  pixels: dict[str, Any]) -> torch.Tensor:
        """Position ids of a full sequence: 1-D for SmolVLM (from 0) and PaliGemma (from 1), Qwen's
        3-D rope ids ``[3, B, L]``."""
        if self.family == "smolvlm":
            return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        if self.family == "paligemma":
            return attention_mask.long().cumsum(-1).clamp_min(1)
        mm_types = (input_ids == self.image_token_id).int()
        positions, _ = inner_model.get_rope_index(input_ids, mm_token_type_ids=mm_types,
                                                  image_grid_thw=pixels["image_grid_thw"],
                                                  attention_mask=attention_mask)
        return positions

    @staticmethod
    def next_positions(positions: torch.Tensor, steps: int) -> torch.Tensor:
        """Positions of ``steps`` text tokens appended after ``positions`` (the last one + 1, + 2, ...)."""
        last = positions[..., -1:]
        offsets = torch.arange(1, steps + 1, device=positions.device)
        return last + offsets


def _pad_id(tokenizer: Any) -> int:
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("the tokenizer has neither a pad nor an eos token; set one and save it beside the model")


def _mean_std(model_dir: Path, family: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Image normalization of the model folder's ``preprocessor_config.json``, else the family's."""
    path = Path(model_dir) / "preprocessor_config.json"
    mean, std = DEFAULT_MEAN_STD[family]
    if path.is_file():
        cfg = json.loads(path.read_text())
        mean, std = tuple(cfg.get("image_mean", mean)), tuple(cfg.get("image_std", std))
    return mean, std

"""Observations -> π0's inputs, and its actions back to the env, in torch (no image processor, no torchvision).

Each step is LeRobot 0.6.1's π0 pipeline, checked against LeRobot itself (``benchmarks/parity/``):

- **Prompt**: the model's cameras' ``<image>`` tokens, then the instruction as LeRobot's π0 tokenizes it: a
  ``\\n`` appended when it does not end with one (nothing else is cleaned), ``<bos>`` first, truncated to the
  tokenizer length (``tokenizer_max_length``, 48) and right-padded to it, so a rollout's prompts stack and replay
  exactly. Positions are the attention mask's cumulative sum minus one, as ``sample_actions`` computes them.
- **Cameras**: each camera's uint8 image scaled to [0, 1], resized as LeRobot's ``resize_with_pad_torch``
  (aspect kept, sizes truncated, plain bilinear with no antialiasing, centred on black) to the SigLIP tower's
  side, then scaled to [-1, 1]. A camera of the model that the env lacks (LeRobot's empty camera: -1 pixels,
  masked out) is left out of the prompt: a masked token changes no attention and no position, so the result is
  the same.
- **State and actions**: normalized with mean/std (``(x - mean) / (std + 1e-8)``, as PI0Processor)
  and zero-padded to ``max_state_dim`` / ``max_action_dim``; actions come back un-normalized, cut to
  the env's dimensions and to the executed ``action_chunk``.

Normalization statistics (:class:`NormStats`) come, in this order, from ``policy.norm_stats``, the
model folder (our ``norm_stats.json``; PI0Processor's ``processor_config.json``; LeRobot's
``policy_preprocessor*normalizer_processor.safetensors``), or the env's action bounds (mapped to
[-1, 1], states left as they are) with a warning; SFT replaces bounds-derived ones by the
demonstrations' mean and std.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

STATS_FILE = "norm_stats.json"
STD_EPS = 1e-8  # PI0Processor's
MIN_FITTED_STD = 1e-2  # a demonstrated dimension that never moves is not scaled up past this


@dataclass
class NormStats:
    """Mean and std of the state and of the actions, per env dimension; where they came from."""

    state_mean: list[float]
    state_std: list[float]
    action_mean: list[float]
    action_std: list[float]
    source: str  # "file <path>", "model folder", "env bounds", "demonstrations"

    @classmethod
    def from_bounds(cls, low: tuple[float, ...], high: tuple[float, ...], state_dim: int) -> NormStats:
        """Actions: the env's bounds onto [-1, 1]; states: as they are."""
        mean = [(lo + hi) / 2 for lo, hi in zip(low, high)]
        std = [(hi - lo) / 2 for lo, hi in zip(low, high)]
        if not all(math.isfinite(s) and s > 0 for s in std):
            raise ValueError(f"policy.norm_stats: the env's action bounds {low} .. {high} are not finite, so they "
                             "cannot normalize actions; give statistics (policy.norm_stats) or SFT first")
        return cls([0.0] * state_dim, [1.0] * state_dim, mean, std, "env bounds")

    def check(self, state_dim: int, action_dim: int, where: str) -> None:
        """Refuse statistics of other dimensions than the env's (both named)."""
        if len(self.action_mean) != action_dim or len(self.action_std) != action_dim:
            raise ValueError(f"{where}: the normalization statistics ({self.source}) have {len(self.action_mean)} "
                             f"action dimensions, the env's action space has {action_dim}")
        if state_dim and (len(self.state_mean) != state_dim or len(self.state_std) != state_dim):
            raise ValueError(f"{where}: the normalization statistics ({self.source}) have {len(self.state_mean)} "
                             f"state dimensions, the env's states have {state_dim}")

    def save(self, directory: Path) -> None:
        (Path(directory) / STATS_FILE).write_text(json.dumps(asdict(self), indent=2))


def load_stats(path: Path, source: str) -> NormStats:
    """Our ``norm_stats.json`` or PI0Processor's ``processor_config.json`` (``state_mean`` ... ``actions_std``)."""
    data = json.loads(Path(path).read_text())
    if "action_mean" in data:
        return NormStats(data["state_mean"], data["state_std"], data["action_mean"], data["action_std"], source)
    keys = ("state_mean", "state_std", "actions_mean", "actions_std")
    if all(data.get(k) is not None for k in keys):
        return NormStats(*(list(map(float, data[k])) for k in keys), source=source)
    raise ValueError(f"{path}: no normalization statistics (need state_mean, state_std, action_mean/actions_mean, "
                     "action_std/actions_std)")


def lerobot_stats(path: Path) -> NormStats:
    """LeRobot's normalizer step state (``observation.state.mean`` ... ``action.std``, safetensors)."""
    from safetensors.torch import load_file

    flat = load_file(str(path))
    keys = ("observation.state.mean", "observation.state.std", "action.mean", "action.std")
    missing = [k for k in keys if k not in flat]
    if missing:
        raise ValueError(f"{path}: LeRobot normalizer statistics lack {missing}")
    return NormStats(*(flat[k].float().reshape(-1).tolist() for k in keys), source=f"LeRobot {path.name}")


def folder_stats(folder: Path) -> NormStats | None:
    """The statistics a model folder carries, if any (ours, PI0Processor's, LeRobot's)."""
    if (folder / STATS_FILE).is_file():
        return load_stats(folder / STATS_FILE, f"{folder / STATS_FILE}")
    config = folder / "processor_config.json"
    if config.is_file() and "actions_mean" in json.loads(config.read_text()):
        return load_stats(config, f"{config}")
    for path in sorted(folder.glob("policy_preprocessor*normalizer_processor.safetensors")):
        return lerobot_stats(path)
    return None


def fitted_stats(states: torch.Tensor | None, actions: torch.Tensor, state_dim: int) -> NormStats:
    """Mean and std of demonstrated states [N, S] and executed actions [M, A]."""
    def mean_std(x: torch.Tensor) -> tuple[list[float], list[float]]:
        x = x.double()
        return x.mean(0).tolist(), x.std(0, correction=0).clamp_min(MIN_FITTED_STD).tolist()

    action_mean, action_std = mean_std(actions)
    if states is None or state_dim == 0:
        return NormStats([0.0] * state_dim, [1.0] * state_dim, action_mean, action_std, "demonstrations")
    return NormStats(*mean_std(states), action_mean, action_std, "demonstrations")


@dataclass
class Prompt:
    """Token ids of a batch of prompts, right-padded to one length."""

    input_ids: torch.Tensor  # int64 [B, L]
    attention_mask: torch.Tensor  # int64 [B, L], 0 on padding


class PI0Inputs:
    """Fixed-length prompts and pixel inputs for π0, from instructions and uint8 images."""

    def __init__(self, tokenizer: Any, pi0_config: Any, num_cameras: int, max_length: int) -> None:
        vlm = pi0_config.vlm_config
        vision = vlm.vision_config
        self.tokenizer = tokenizer
        self.image_size = int(vision.image_size)
        self.tokens_per_image = (self.image_size // int(vision.patch_size)) ** 2
        self.num_cameras = num_cameras
        self.max_length = max_length
        self.image_token_id = int(vlm.image_token_id)
        self.bos_id = _token_id(tokenizer, "bos")
        self.pad_id = _token_id(tokenizer, "pad")
        self._images = [self.image_token_id] * (self.tokens_per_image * num_cameras)
        self.length = len(self._images) + max_length
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def prompts(self, instructions: list[str]) -> Prompt:
        rows = [self._encode(text) for text in instructions]
        return Prompt(torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))

    def instruction_ids(self, text: str) -> list[int]:
        """The instruction's tokens as LeRobot's π0 makes them: ``\\n`` appended when missing (its
        ``Pi0NewLineProcessor``; no other cleaning), tokenized with ``<bos>`` first, truncated to ``max_length``."""
        ids = list(self.tokenizer(text if text.endswith("\n") else text + "\n")["input_ids"])
        if not ids or ids[0] != self.bos_id:  # PaliGemma's tokenizer adds <bos> itself; a tiny one may not
            ids = [self.bos_id] + ids
        if len(ids) > self.max_length:
            warnings.warn(f"policy.max_instruction_tokens: the instruction {text!r} is {len(ids)} tokens with <bos> "
                          f"and its newline, more than {self.max_length}; truncated as LeRobot truncates it",
                          stacklevel=4)
        return ids[:self.max_length]

    def _encode(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        if text not in self._cache:
            row = self._images + self.instruction_ids(text)
            pad = self.length - len(row)
            self._cache[text] = (torch.tensor(row + [self.pad_id] * pad, dtype=torch.long),
                                 torch.tensor([1] * len(row) + [0] * pad, dtype=torch.long))
        return self._cache[text]

    def pixels(self, images: list[torch.Tensor], device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """``pixel_values`` [B, cameras, 3, S, S] in [-1, 1] and ``pixel_attention_mask`` [B, cameras]."""
        cameras = [resize_with_pad(im.to(device).permute(0, 3, 1, 2).float().div_(255.0), self.image_size)
                   for im in images]  # each [B, 3, S, S]: cameras may differ in size
        x = torch.stack(cameras, 1) * 2.0 - 1.0
        return {"pixel_values": x.to(dtype),
                "pixel_attention_mask": torch.ones(x.shape[0], len(images), dtype=torch.bool, device=device)}


def resize_with_pad(x: torch.Tensor, side: int) -> torch.Tensor:
    """[N, 3, H, W] in [0, 1] -> [N, 3, side, side], as LeRobot's (and openpi's) ``resize_with_pad_torch``: scaled
    by the larger ratio with the sizes truncated (``int(h / ratio)``), plain bilinear (no antialiasing), clamped,
    centred on black."""
    h, w = x.shape[-2:]
    if h == side and w == side:
        return x
    ratio = max(w / side, h / side)
    nh, nw = int(h / ratio), int(w / ratio)
    x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    top, left = (side - nh) // 2, (side - nw) // 2
    return F.pad(x, (left, side - nw - left, top, side - nh - top))


def _token_id(tokenizer: Any, role: str) -> int:
    token_id = getattr(tokenizer, f"{role}_token_id", None)
    if token_id is None and role == "bos":
        token_id = tokenizer.convert_tokens_to_ids("<bos>")
    if token_id is None and role == "pad":
        token_id = tokenizer.eos_token_id
    if token_id is None or token_id == getattr(tokenizer, "unk_token_id", -1):
        raise ValueError(f"the π0 tokenizer has no {role} token; save PaliGemma's tokenizer beside the model "
                         "(or set policy.tokenizer_path)")
    return int(token_id)

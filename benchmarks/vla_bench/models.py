"""The VLA policies the benchmark times, one per head name and scale, and the observations they act on."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.core.types import MAIN_IMAGES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs
from embodied.policy.base import PolicySpec

HEADS = ("tokens", "autoregressive", "gaussian", "flow-k10", "flow-k4", "flow-k4-noise")
DEFAULT_HEADS = HEADS
INSTRUCTIONS = ("pick up the red cube", "pick up the green cube", "reach the red target",
                "push the red cube into the green goal region", "stack the red cube on the green cube",
                "pick up the red cube and place it at the green target")
# --scale medium: the tiny SmolVLM config with SmolLM2-135M's text widths and a small SigLIP-like tower.
MEDIUM_VISION = dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=6)
MEDIUM_TEXT = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                   num_key_value_heads=3, head_dim=64)
# --scale large: SmolLM2-360M's text widths, a SigLIP-B-like tower; with the expert below, ~400M parameters.
LARGE_VISION = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
LARGE_TEXT = dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                  num_key_value_heads=5, head_dim=64)
EXPERT = {"tiny": (128, 4, 4), "medium": (384, 6, 6), "large": (1024, 8, 8)}  # flow width, depth, heads per scale


def head_fields(head: str, scale: str) -> dict[str, Any]:
    """VLAConfig fields of a benchmark head name (``flow-k4-noise``: flow, 4 steps, Flow-Noise)."""
    if not head.startswith("flow"):
        return {"action_head": head}
    parts = head.split("-")
    width, depth, heads = EXPERT[scale]
    return {"action_head": "flow", "flow_steps": int(parts[1][1:]), "flow_logprob": parts[2] if len(parts) > 2 else "sde",
            "flow_width": width, "flow_depth": depth, "flow_heads": heads}


def build_medium_smolvlm(out_dir: Path, seed: int = 0, scale: str = "medium") -> Path:
    """tiny.py's SmolVLM config with wider, deeper towers (``MEDIUM_*`` or ``LARGE_*``), saved with save_pretrained."""
    from transformers import AutoModelForImageTextToText

    from embodied.policies.vla.tiny import TINY_BACKBONES, quiet_transformers, train_tokenizer

    quiet_transformers()
    family, make_config = TINY_BACKBONES["smolvlm-tiny"]
    tokenizer = train_tokenizer(family)
    tiny = make_config(tokenizer)
    cfg = tiny.to_dict()
    cfg["vision_config"].update(MEDIUM_VISION if scale == "medium" else LARGE_VISION)
    cfg["text_config"].update(MEDIUM_TEXT if scale == "medium" else LARGE_TEXT)
    config = type(tiny).from_dict(cfg)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def make_policy(args: argparse.Namespace, model_path: str, head: str) -> Any:
    from embodied.policies.vla.configuration import VLAConfig
    from embodied.policies.vla.modeling import VLAPolicy

    side = args.image_size
    spec = PolicySpec(state_dim=0, image_shape=(side, side, 3), action_dim=args.action_dim,
                      action_low=(-1.0,) * args.action_dim, action_high=(1.0,) * args.action_dim,
                      wrist_image_shape=(side, side, 3))
    config = VLAConfig(model_path=model_path, action_chunk=args.chunk, lora_rank=args.lora_rank,
                       device=args.device, dtype=args.dtype, **head_fields(head, args.scale))
    torch.manual_seed(args.seed)
    return VLAPolicy(config, spec)


def make_obs(batch: int, side: int, seed: int) -> Obs:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(2, batch, side, side, 3), dtype=np.uint8)
    return {MAIN_IMAGES: images[0], WRIST_IMAGES: images[1],
            TASK_DESCRIPTIONS: [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(batch)]}

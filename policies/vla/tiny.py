"""Tiny VLA backbones built offline: a BPE tokenizer trained on the built-in task descriptions and a
few-million-parameter image-text-to-text model of a real family, saved with ``save_pretrained``.

    from embodied.policies.vla.tiny import build_tiny_vla
    build_tiny_vla("runs/tiny-smolvlm", backbone="smolvlm-tiny")
    # transformers alone reads it back:
    AutoModelForImageTextToText.from_pretrained("runs/tiny-smolvlm")

``embodied make-tiny-vla OUT_DIR --backbone NAME`` is the command-line form. A recipe whose
``policy.model_path`` is ``tiny:NAME`` builds the model once into ``~/.cache/embodied/tiny-vla/NAME``
(``EMBODIED_CACHE`` moves it) and loads it from there, so nothing is downloaded.

The vocabulary leaves its last ``ACTION_BINS`` ids unused by text: they are the action bins,
as in OpenVLA, and the families' special image tokens sit just before them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from embodied.policies.transformers_base import folders
from embodied.policies.transformers_base.folders import quiet_transformers
from embodied.policies.transformers_base.tiny import cache_dir, cached_tiny, save_tiny, train_tokenizer

__all__ = ["ACTION_BINS", "TINY_BACKBONES", "build_tiny_vla", "cache_dir", "cached_tiny", "describe",
           "paligemma_3b_config", "quiet_transformers", "resolve_model_path", "save_tiny", "train_tokenizer"]
ACTION_BINS = 256  # the vocabulary's last ids, unused by text: the action bins


def _smolvlm_config(tokenizer: Any) -> Any:
    from transformers import Idefics3Config

    vocab = len(tokenizer) + ACTION_BINS
    return Idefics3Config(
        vision_config=dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=2,
                           image_size=64, patch_size=8),
        text_config=dict(model_type="llama", vocab_size=vocab, hidden_size=192, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id),
        scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )


def _qwen2_5_vl_config(tokenizer: Any) -> Any:
    from transformers import Qwen2_5_VLConfig

    vocab = len(tokenizer) + ACTION_BINS
    ids = tokenizer.convert_tokens_to_ids
    return Qwen2_5_VLConfig(
        vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=8,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=32, out_hidden_size=192,
                           fullatt_block_indexes=[1]),
        text_config=dict(vocab_size=vocab, hidden_size=192, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 8, 8]},
                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def _paligemma_config(tokenizer: Any) -> Any:
    from transformers import PaliGemmaConfig

    vocab = len(tokenizer) + ACTION_BINS
    return PaliGemmaConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=96, intermediate_size=192,
                           num_hidden_layers=2, num_attention_heads=2, image_size=64, patch_size=16,
                           projection_dim=192),
        text_config=dict(model_type="gemma", vocab_size=vocab, hidden_size=192, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=48,
                         max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.convert_tokens_to_ids("<bos>"), eos_token_id=tokenizer.eos_token_id),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), projection_dim=192, hidden_size=192,
        pad_token_id=tokenizer.pad_token_id,
    )


def paligemma_3b_config() -> Any:
    """PaliGemma-3B's shapes (SigLIP-So400m/14 at 224, Gemma-2B, 257k vocabulary), π0's backbone;
    for construction checks (on the meta device), since its weights cannot be downloaded here."""
    from transformers import PaliGemmaConfig

    return PaliGemmaConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                           num_hidden_layers=27, num_attention_heads=16, image_size=224, patch_size=14,
                           projection_dim=2048),
        text_config=dict(model_type="gemma", vocab_size=257152, hidden_size=2048, intermediate_size=16384,
                         num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1, head_dim=256),
        image_token_id=257152, projection_dim=2048, hidden_size=2048,
    )


# Named tiny backbones: family of the prompt format, and its config builder.
TINY_BACKBONES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "smolvlm-tiny": ("smolvlm", _smolvlm_config),
    "qwen2_5_vl-tiny": ("qwen2_5_vl", _qwen2_5_vl_config),
    "paligemma-tiny": ("paligemma", _paligemma_config),
}


def build_tiny_vla(out_dir: str | Path, backbone: str = "smolvlm-tiny", seed: int = 0) -> Path:
    """Build the named tiny backbone and its tokenizer into ``out_dir`` (written atomically)."""
    from transformers import AutoModelForImageTextToText

    if backbone not in TINY_BACKBONES:
        raise ValueError(f"unknown tiny backbone {backbone!r}; known: {', '.join(TINY_BACKBONES)}")
    family, make_config = TINY_BACKBONES[backbone]
    quiet_transformers()
    tokenizer = train_tokenizer(family)
    config = make_config(tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    return save_tiny(out_dir, model, tokenizer)


def make_tiny(out_dir: str | Path, name: str, seed: int = 0) -> str:
    """``embodied make-tiny-vla --backbone NAME``: build tiny backbone ``name`` into ``out_dir``; what was written."""
    return describe(build_tiny_vla(out_dir, name, seed))


def resolve_model_path(model_path: str) -> Path:
    """A local model directory for ``policy.model_path``; ``tiny:NAME`` is built into the cache once."""
    return folders.resolve_model_path(model_path, "tiny-vla", tuple(TINY_BACKBONES), build_tiny_vla, "backbone")


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def describe(path: Path) -> str:
    """A few lines on a saved tiny model: class, parameters, vocabulary, how to load it."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_config(config)
    text = config.get_text_config()
    return (f"wrote {path}: {type(model).__name__} ({config.model_type}), {parameter_count(model) / 1e6:.2f}M parameters, "
            f"vocabulary {text.vocab_size} (last {ACTION_BINS} ids: action bins), hidden {text.hidden_size}\n"
            f"load it with transformers.AutoModelForImageTextToText.from_pretrained({str(path)!r}), "
            f"or set policy.model_path: {path}")

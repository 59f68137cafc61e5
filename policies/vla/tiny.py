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

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from embodied.atomic import atomic_dir

ACTION_BINS = 256
from embodied.policies.vla.configuration import TINY_PREFIX

# Text the tokenizer learns from: every built-in task description plus the words of prompts,
# numbers (states as text) and colours, so any built-in instruction tokenizes compactly.
CORPUS = [
    "reach the red target", "push the red cube into the green goal region",
    "pick up the red cube and place it at the green target", "stack the red cube on the green cube",
    *[f"pick up the {c} cube" for c in ("red", "green", "blue", "yellow")],
    "What action should the robot take to", "state", "In: Out:", "User: Assistant:",
    " ".join(str(i) for i in range(256)), "0 1 2 3 4 5 6 7 8 9 - . ,",
]

# Special tokens each family's prompt uses (image placeholders, turn markers, padding).
SPECIAL_TOKENS = {
    "smolvlm": ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>",
                "<image>"],
    "paligemma": ["<|endoftext|>", "<bos>", "<image>"],
    "qwen2_5_vl": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                   "<|image_pad|>", "<|video_pad|>"],
}


def quiet_transformers() -> None:
    """No per-load progress bars or info lines from every worker."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("peft").setLevel(logging.ERROR)


def train_tokenizer(family: str) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``CORPUS`` with the family's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = SPECIAL_TOKENS[family]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": specials[1:]})
    return fast


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


def save_tiny(out_dir: str | Path, model: Any, tokenizer: Any) -> Path:
    """``save_pretrained`` of a tiny model and its tokenizer into ``out_dir``, written atomically."""
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out


def cache_dir(kind: str = "tiny-vla") -> Path:
    """Where ``tiny:NAME`` models of a kind (``tiny-vla``, ``tiny-pi0``) are built on first use."""
    root = os.environ.get("EMBODIED_CACHE") or Path.home() / ".cache" / "embodied"
    return Path(root) / kind


def cached_tiny(kind: str, name: str, build: Callable[[Path, str], Path]) -> Path:
    """The cached folder of tiny model ``name``, built by ``build(path, name)`` the first time.

    Processes that find it missing at once (Ray workers of one run, parallel test workers) each build into a
    folder of their own and publish it with one ``rename``, which fails once the name exists: the first build
    wins and the others are dropped. Replacing the folder instead would leave a moment without it, in which a
    process that is reading it finds nothing."""
    path = cache_dir(kind) / name
    if not (path / "config.json").is_file():
        if path.exists() and not (path / "config.json").is_file():  # a folder left by something else
            shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f"{path.name}.build{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        build(staging, name)
        try:
            os.rename(staging, path)
        except OSError:  # another process published it first; its build is the same
            shutil.rmtree(staging, ignore_errors=True)
    return path


def resolve_model_path(model_path: str) -> Path:
    """A local model directory for ``policy.model_path``; ``tiny:NAME`` is built into the cache once."""
    if not model_path.startswith(TINY_PREFIX):
        return Path(model_path).expanduser()
    return cached_tiny("tiny-vla", model_path[len(TINY_PREFIX):], build_tiny_vla)


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

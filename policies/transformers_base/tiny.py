"""Tiny models built offline, once, into a cache: what ``policy.model_path: tiny:NAME`` names.

    from embodied.policies.transformers_base.tiny import cached_tiny, save_tiny, train_tokenizer
    tokenizer = train_tokenizer("paligemma")          # byte-level BPE on the built-in task texts
    folder = cached_tiny("tiny-pi0", "pi0-tiny", lambda path, name: save_tiny(path, build(tokenizer), tokenizer))

The folder is ``~/.cache/embodied/<kind>/<name>`` (``EMBODIED_CACHE`` moves it); nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodied.core.atomic import atomic_dir

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

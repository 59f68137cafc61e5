"""Where a transformers policy's model comes from: ``policy.model_path`` to a folder, its tokenizer, quiet loads.

    folder = resolve_model_path("tiny:pi0-tiny", "tiny-pi0", ("pi0-tiny",), build, "π0")  # built once, cached
    tokenizer = load_tokenizer(folder)                      # or load_tokenizer(folder, "path/to/tokenizer")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embodied.policies.transformers_base.configuration import TINY_PREFIX
from embodied.policies.transformers_base.tiny import cached_tiny


def quiet_transformers() -> None:
    """No per-load progress bars or info lines from every worker."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("peft").setLevel(logging.ERROR)


def resolve_model_path(model_path: str, kind: str, names: Sequence[str], build: Callable[[Path, str], Path],
                       noun: str = "model") -> Path:
    """A local folder for ``policy.model_path``: the path itself, or ``tiny:NAME`` (one of ``names``) built by
    ``build(path, name)`` once into the cache folder of ``kind`` (``tiny-vla``, ``tiny-pi0``)."""
    if not model_path.startswith(TINY_PREFIX):
        return Path(model_path).expanduser()
    name = model_path[len(TINY_PREFIX):]
    if name not in names:
        raise ValueError(f"policy.model_path: unknown tiny {noun} {name!r}; known: {', '.join(names)}")
    return cached_tiny(kind, name, build)


def load_tokenizer(folder: Path, tokenizer_path: str | None = None, hint: str = "") -> Any:
    """The tokenizer of ``folder``, or of ``tokenizer_path`` when given; a folder without one is named (``hint``
    says where one may be found)."""
    from transformers import AutoTokenizer

    tokenizer_dir = Path(tokenizer_path).expanduser() if tokenizer_path else folder
    try:
        return AutoTokenizer.from_pretrained(tokenizer_dir)
    except (OSError, ValueError) as exc:
        where = "policy.tokenizer_path" if tokenizer_path else "policy.model_path"
        raise ValueError(f"{where}: no tokenizer in {str(tokenizer_dir)!r}{'' if tokenizer_path else hint}: "
                         f"{exc}") from None

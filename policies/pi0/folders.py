"""What a π0 folder is, read without torch: its ``config.json``, and the names of the tiny ones built offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TINY_PREFIX = "tiny:"
TINY_NAMES = ("pi0-tiny",)


def read_config_json(path: Path) -> dict[str, Any] | None:
    """A folder's ``config.json`` as a dict (None when absent or unreadable)."""
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None


def pi0_folder_problem(path: Path) -> tuple[str | None, int | None]:
    """(what is wrong with ``path`` as a π0 folder or None, the chunk_size its config declares)."""
    where = f"policy.model_path: {str(path)!r}"
    if not path.is_dir():
        return f"{where} is not a folder (a PI0ForConditionalGeneration save_pretrained folder, a LeRobot π0 " \
               "folder, or tiny:pi0-tiny)", None
    config = read_config_json(path)
    if config is None:
        return f"{where} has no readable config.json", None
    kind = config.get("model_type") or config.get("type")
    if kind != "pi0":
        return (f"{where} is not a π0: its config.json says {('model_type' if 'model_type' in config else 'type')}="
                f"{kind!r} (policy.type=vla reads image-text-to-text backbones)"), None
    return None, config.get("chunk_size", 50)

"""Checkpoints: written atomically (temp file, then rename), so a crash never leaves half a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` (with a clear error if it is missing)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return torch.load(path, map_location="cpu", weights_only=False)

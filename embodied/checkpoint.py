"""Checkpoints: written atomically (temp file, then rename), so a crash never leaves half a file.

A training checkpoint is ``<run_dir>/checkpoints/iter_XXXXXX.pt`` holding ``iteration``,
``env_steps``, ``actor`` (policy, optimizer, version), ``config`` and ``wandb_id``;
``load_resume_point`` turns one (or a run dir: its latest) back into where training goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied.atomic import atomic_path

CHECKPOINT_GLOB = "iter_*.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` (with a clear error if it is missing)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return torch.load(path, map_location="cpu", weights_only=False)


def find_checkpoint(path: str | Path) -> Path:
    """``path`` itself if it is a file; for a run dir (or its ``checkpoints/``), its latest checkpoint."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{str(path)!r} is neither a checkpoint file nor a run directory")
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = sorted(folder.glob(CHECKPOINT_GLOB))
    if not found:
        raise FileNotFoundError(f"no checkpoints ({CHECKPOINT_GLOB}) in {str(folder)!r}")
    return found[-1]  # zero-padded iteration numbers sort in order


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


@dataclass
class ResumePoint:
    """Where a resumed run goes on: its run dir, counters, actor state and wandb run."""

    checkpoint: Path
    run_dir: Path
    iteration: int  # the last iteration done; training goes on with iteration + 1
    env_steps: int
    actor: dict[str, Any]  # ActorWorker.state(): policy, optimizer, version
    wandb_id: str | None


def load_resume_point(path: str | Path) -> ResumePoint:
    """Read the checkpoint ``path`` names (a file, or a run dir: its latest checkpoint)."""
    checkpoint = find_checkpoint(path)
    state = load_checkpoint(checkpoint)
    missing = [k for k in ("iteration", "env_steps", "actor") if k not in state]
    if missing:
        raise ValueError(f"checkpoint {checkpoint} cannot be resumed from: it lacks {missing}")
    return ResumePoint(checkpoint, run_dir_of(checkpoint), int(state["iteration"]), int(state["env_steps"]),
                       state["actor"], state.get("wandb_id"))

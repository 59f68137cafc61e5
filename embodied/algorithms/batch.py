"""Rows of a flat batch of chunk steps (``base.flatten``'s dict: ``forward_inputs`` a dict of tensors, every other
entry a tensor ``[B, ...]``): a minibatch's rows, on the policy's device."""

from __future__ import annotations

from typing import Any

import torch


def take(batch: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """Rows ``index`` of every tensor of a flattened batch (forward_inputs included)."""
    return {k: {n: t[index] for n, t in v.items()} if isinstance(v, dict) else v[index] for k, v in batch.items()}


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of a minibatch on ``device`` (a no-op on the CPU: the batch itself)."""
    if device.type == "cpu":
        return batch
    return {k: {n: t.to(device) for n, t in v.items()} if isinstance(v, dict) else v.to(device)
            for k, v in batch.items()}


def expand_rows(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A [B] tensor broadcast over the trailing dims of ``like``."""
    return rows.reshape(rows.shape + (1,) * (like.dim() - 1)).expand_as(like)

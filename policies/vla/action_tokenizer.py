"""Continuous actions <-> per-dimension bins <-> the last ids of the vocabulary (as OpenVLA does).

Env actions are first normalized to [-1, 1] per dimension with bounds ``low``/``high`` (the env's
action space, or q01/q99 statistics of demonstrations), then cut into ``n_bins`` uniform bins;
bin ``k`` is token id ``vocab_size - n_bins + k``. On the way out a bin becomes its centre and is
mapped back to env units. The bounds travel with every checkpoint (``action_tokenizer.json``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

FILE_NAME = "action_tokenizer.json"


@dataclass
class ActionTokenizer:
    n_bins: int
    vocab_size: int  # the backbone's vocabulary; the action bins are its last n_bins ids
    low: list[float]  # per-dimension value mapped to -1
    high: list[float]  # per-dimension value mapped to +1

    def __post_init__(self) -> None:
        if len(self.low) != len(self.high):
            raise ValueError(f"action bounds differ in length: low {len(self.low)}, high {len(self.high)}")
        if self.n_bins > self.vocab_size:
            raise ValueError(f"{self.n_bins} action bins do not fit a vocabulary of {self.vocab_size} ids")
        lo, hi = torch.tensor(self.low, dtype=torch.float64), torch.tensor(self.high, dtype=torch.float64)
        if not (torch.isfinite(lo).all() and torch.isfinite(hi).all() and (hi > lo).all()):
            raise ValueError(f"action bounds must be finite with high > low, got low={self.low} high={self.high}")

    @property
    def action_dim(self) -> int:
        return len(self.low)

    @property
    def first_token_id(self) -> int:
        return self.vocab_size - self.n_bins

    def _bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.tensor(self.low, dtype=like.dtype, device=like.device),
                torch.tensor(self.high, dtype=like.dtype, device=like.device))

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        """Env units -> [-1, 1] (values outside the bounds map outside, unclipped)."""
        low, high = self._bounds(actions)
        return 2.0 * (actions - low) / (high - low) - 1.0

    def denormalize(self, normalized: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> env units."""
        low, high = self._bounds(normalized)
        return low + (normalized + 1.0) * 0.5 * (high - low)

    def to_bins(self, normalized: torch.Tensor) -> torch.Tensor:
        """Bin index (long) of each normalized value; values outside [-1, 1] fall into the end bins."""
        bins = torch.floor((normalized + 1.0) * 0.5 * self.n_bins)
        return bins.clamp(0, self.n_bins - 1).long()

    def bin_centers(self, bins: torch.Tensor) -> torch.Tensor:
        """The normalized value (float32) at the centre of each bin."""
        return (bins.float() + 0.5) * (2.0 / self.n_bins) - 1.0

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions -> bin indices (what the token heads score)."""
        return self.to_bins(self.normalize(actions.double()))

    def decode(self, bins: torch.Tensor) -> torch.Tensor:
        """Bin indices -> env actions (float32)."""
        return self.denormalize(self.bin_centers(bins).double()).float()

    def save(self, directory: Path) -> Path:
        path = Path(directory) / FILE_NAME
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, directory: Path) -> ActionTokenizer:
        path = Path(directory) / FILE_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: a VLA checkpoint keeps its action bins and bounds there")
        return cls(**json.loads(path.read_text()))


def stats_bounds(model_dir: Path) -> tuple[list[float], list[float]]:
    """q01/q99 per action dimension from ``<model_dir>/action_stats.json`` (OpenVLA's normalization)."""
    path = Path(model_dir) / "action_stats.json"
    if not path.is_file():
        raise FileNotFoundError(f"policy.action_norm=model_stats: {path} is missing")
    stats = json.loads(path.read_text())
    try:
        return [float(x) for x in stats["q01"]], [float(x) for x in stats["q99"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: needs lists 'q01' and 'q99' (one number per action dimension): {exc!r}") from None

"""Observations -> π0.5's inputs: the normalisation (quantiles by default) and the prompt with the state in it.

What differs from π0's pipeline (``policies/pi0/processing.py``: cameras, resize, padding are π0's), read from
LeRobot 0.6.1's ``processor_pi05.py`` and its normalizer step:

- **Normalisation** (:class:`PI05Stats`): ``quantiles`` (π0.5's default) maps q01/q99 onto [-1, 1] as
  ``2 (x - q01) / (q99 - q01) - 1`` (a zero range becomes 1e-8); ``mean_std`` is ``(x - mean) / (std + 1e-8)``.
  Actions come back through the inverse.
- **Prompt** (:class:`PI05Inputs`): the normalised state cut into 256 bins over [-1, 1] (``np.digitize`` on
  ``linspace(-1, 1, 257)[:-1]``, minus one: below -1 is -1, above 1 is 255), written into
  ``"Task: {task}, State: {s0 s1 ...};\\nAction: "`` with the task stripped, ``_`` and newlines made spaces; the
  tokenizer's ids (``<bos>`` first) truncated and right-padded to ``tokenizer_max_length`` (200).

Statistics come, in this order, from ``policy.norm_stats``, the model folder (our ``norm_stats.json``, LeRobot's
``policy_preprocessor*normalizer_processor.safetensors`` with the folder's ``normalization_mapping``), or the env's
action bounds (q01/q99 = low/high; states unnormalised) with a warning; SFT fits them to its demonstrations.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from embodied.policies.pi0.processing import MIN_FITTED_STD, STATS_FILE, STD_EPS, PI0Inputs, Prompt

MODES = ("quantiles", "mean_std")  # policy.normalization
STAT_KEYS = {"quantiles": ("q01", "q99"), "mean_std": ("mean", "std")}
QUANTILE_EPS = 1e-8  # LeRobot's normalizer eps, for a zero q99 - q01
STATE_BINS = 256


@dataclass
class PI05Stats:
    """The state's and the actions' statistics per env dimension: (q01, q99) or (mean, std) as ``lo``, ``hi``."""

    mode: str  # quantiles | mean_std
    state_lo: list[float]
    state_hi: list[float]
    action_lo: list[float]
    action_hi: list[float]
    source: str

    @classmethod
    def from_bounds(cls, low: tuple[float, ...], high: tuple[float, ...], state_dim: int,
                    mode: str) -> PI05Stats:
        """Actions: the env's bounds onto [-1, 1] (as q01/q99, or as mean/std = centre/half-range), in ``mode``,
        so SFT then fits the demonstrations' statistics in the mode the policy was asked for; states: as they are."""
        if not all(np.isfinite(lo) and np.isfinite(hi) and hi > lo for lo, hi in zip(low, high)):
            raise ValueError(f"policy.norm_stats: the env's action bounds {low} .. {high} are not finite, so they "
                             "cannot normalize actions; give statistics (policy.norm_stats) or SFT first")
        if mode == "mean_std":
            centre = [(lo + hi) / 2 for lo, hi in zip(low, high)]
            half = [(hi - lo) / 2 for lo, hi in zip(low, high)]
            return cls(mode, [0.0] * state_dim, [1.0] * state_dim, centre, half, "env bounds")
        return cls(mode, [-1.0] * state_dim, [1.0] * state_dim, list(low), list(high), "env bounds")

    def check(self, state_dim: int, action_dim: int, where: str) -> None:
        """Refuse statistics of other dimensions than the env's (both named)."""
        if len(self.action_lo) != action_dim or len(self.action_hi) != action_dim:
            raise ValueError(f"{where}: the normalization statistics ({self.source}) have {len(self.action_lo)} "
                             f"action dimensions, the env's action space has {action_dim}")
        if state_dim and (len(self.state_lo) != state_dim or len(self.state_hi) != state_dim):
            raise ValueError(f"{where}: the normalization statistics ({self.source}) have {len(self.state_lo)} "
                             f"state dimensions, the env's states have {state_dim}")

    def save(self, directory: Path) -> None:
        (Path(directory) / STATS_FILE).write_text(json.dumps(asdict(self), indent=2))


def normalize(x: torch.Tensor, mode: str, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """LeRobot's normalizer step, exactly (float32)."""
    if mode == "quantiles":
        denom = hi - lo
        denom = torch.where(denom == 0, torch.tensor(QUANTILE_EPS, dtype=x.dtype, device=x.device), denom)
        return 2.0 * (x - lo) / denom - 1.0
    return (x - lo) / (hi + STD_EPS)


def unnormalize(x: torch.Tensor, mode: str, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`normalize`."""
    if mode == "quantiles":
        denom = hi - lo
        denom = torch.where(denom == 0, torch.tensor(QUANTILE_EPS, dtype=x.dtype, device=x.device), denom)
        return (x + 1.0) * denom / 2.0 + lo
    return x * (hi + STD_EPS) + lo


def load_stats(path: Path, source: str) -> PI05Stats:
    """Our ``norm_stats.json`` (π0.5's, with its ``mode``)."""
    data = json.loads(Path(path).read_text())
    if data.get("mode") not in MODES:
        raise ValueError(f"{path}: not π0.5 normalization statistics (need mode: quantiles or mean_std and "
                         "state_lo, state_hi, action_lo, action_hi)")
    return PI05Stats(data["mode"], data["state_lo"], data["state_hi"], data["action_lo"], data["action_hi"], source)


def lerobot_stats(path: Path, mode: str, folder: Path) -> PI05Stats:
    """LeRobot's normalizer step state (``observation.state.q01`` ... ``action.q99``, or ``.mean`` / ``.std``)."""
    from safetensors.torch import load_file

    flat = load_file(str(path))
    lo, hi = STAT_KEYS[mode]
    keys = [f"{f}.{s}" for f in ("observation.state", "action") for s in (lo, hi)]
    missing = [k for k in keys if k not in flat]
    if missing:
        raise ValueError(f"policy.model_path {str(folder)!r}: its normalization_mapping asks for {mode} statistics "
                         f"but {path.name} lacks {missing} (give policy.norm_stats or policy.normalization)")
    return PI05Stats(mode, *(flat[k].float().reshape(-1).tolist() for k in keys), source=f"LeRobot {path.name}")


def folder_stats(folder: Path, mode: str) -> PI05Stats | None:
    """The statistics a model folder carries, if any (ours, or LeRobot's in ``mode``)."""
    if (folder / STATS_FILE).is_file():
        return load_stats(folder / STATS_FILE, f"{folder / STATS_FILE}")
    for path in sorted(folder.glob("policy_preprocessor*normalizer_processor.safetensors")):
        return lerobot_stats(path, mode, folder)
    return None


def fitted_stats(states: torch.Tensor | None, actions: torch.Tensor, state_dim: int, mode: str) -> PI05Stats:
    """q01/q99 (or mean/std) of demonstrated states [N, S] and executed actions [M, A]."""
    def pair(x: torch.Tensor) -> tuple[list[float], list[float]]:
        x = x.double()
        if mode == "quantiles":
            lo, hi = torch.quantile(x, 0.01, dim=0), torch.quantile(x, 0.99, dim=0)
            return lo.tolist(), torch.maximum(hi, lo + 2 * MIN_FITTED_STD).tolist()
        return x.mean(0).tolist(), x.std(0, correction=0).clamp_min(MIN_FITTED_STD).tolist()

    state_lo, state_hi = pair(states) if states is not None and state_dim else ([], [])
    return PI05Stats(mode, state_lo, state_hi, *pair(actions), source="demonstrations")


def discretize(states: np.ndarray) -> np.ndarray:
    """Normalised states [B, S] -> bins in -1 .. 255 (openpi's ``PaligemmaTokenizer.tokenize``, LeRobot's step)."""
    return np.digitize(states, bins=np.linspace(-1, 1, STATE_BINS + 1)[:-1]) - 1


def prompt_text(task: str, bins: np.ndarray) -> str:
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    return f"Task: {cleaned}, State: {' '.join(map(str, bins))};\nAction: "


class PI05Inputs(PI0Inputs):
    """π0's images and padding; the prompt holds the task and the discretised state (one per row, not cached)."""

    def prompts(self, instructions: list[str], states: np.ndarray | None = None) -> Prompt:
        """``states``: the normalised states [B, S] (None or S = 0: an empty state in the prompt)."""
        rows = []
        for i, text in enumerate(instructions):
            bins = discretize(states[i]) if states is not None else np.zeros(0, dtype=np.int64)
            ids = list(self.tokenizer(prompt_text(text, bins))["input_ids"])
            if not ids or ids[0] != self.bos_id:  # PaliGemma's tokenizer adds <bos> itself; a tiny one may not
                ids = [self.bos_id] + ids
            row = self._images + ids[:self.max_length]
            pad = self.length - len(row)
            rows.append((torch.tensor(row + [self.pad_id] * pad, dtype=torch.long),
                         torch.tensor([1] * len(row) + [0] * pad, dtype=torch.long)))
        return Prompt(torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows]))

"""Feature statistics in LeRobot's shape: ``meta/stats.json`` and the per-episode ``stats/*`` columns.

Per feature: ``min``, ``max``, ``mean``, ``std``, ``count`` and the quantiles ``q01 q10 q50 q90 q99``
over frames. Vectors get one value per dimension ([D]; scalars [1]); cameras one per channel,
[3, 1, 1], over the pixels of up to ``IMAGE_SAMPLES`` frames an episode, scaled to [0, 1]. The
dataset's statistics aggregate the episodes' as LeRobot's ``aggregate_stats`` does: means and
quantiles weighted by count, the variance pooled.
"""

from __future__ import annotations

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
IMAGE_SAMPLES = 100  # frames of an episode sampled for a camera's statistics
IMAGE_SIDE = 150  # ... each subsampled to at most this many pixels a side (LeRobot's auto-downsampling)

Stats = dict[str, np.ndarray]


def vector_stats(values: np.ndarray) -> Stats:
    """Statistics of [N, D] (or [N]) values over the N frames."""
    v = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    out = {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0), "count": np.array([len(v)])}
    return out | {name: np.quantile(v, q, axis=0) for name, q in QUANTILES.items()}


def image_stats(frames: np.ndarray) -> Stats:
    """Per-channel statistics ([3, 1, 1], in [0, 1]) of uint8 [N, H, W, 3] frames, sampled."""
    picked = frames[np.linspace(0, len(frames) - 1, min(len(frames), IMAGE_SAMPLES)).round().astype(int)]
    step = max(1, int(np.ceil(max(picked.shape[1:3]) / IMAGE_SIDE)))
    pixels = picked[:, ::step, ::step].reshape(-1, 3).astype(np.float64) / 255.0
    stats = vector_stats(pixels)
    shaped = {k: v.reshape(3, 1, 1) for k, v in stats.items() if k != "count"}
    return shaped | {"count": np.array([len(picked)])}  # frames sampled, as LeRobot counts them


def aggregate(parts: list[Stats]) -> Stats:
    """The statistics of several episodes together, from theirs."""
    counts = np.array([float(p["count"][0]) for p in parts])
    weights = counts / counts.sum()

    def weighted(name: str) -> np.ndarray:
        return sum(w * p[name] for w, p in zip(weights, parts))

    mean = weighted("mean")
    variance = sum(w * (p["std"] ** 2 + (p["mean"] - mean) ** 2) for w, p in zip(weights, parts))
    return {"min": np.min([p["min"] for p in parts], axis=0), "max": np.max([p["max"] for p in parts], axis=0),
            "mean": mean, "std": np.sqrt(variance), "count": np.array([int(counts.sum())]),
            **{name: weighted(name) for name in QUANTILES}}


def to_json(stats: dict[str, Stats]) -> dict[str, dict[str, list]]:
    """Nested lists, as ``stats.json`` holds them."""
    return {feature: {k: np.asarray(v).tolist() for k, v in s.items()} for feature, s in stats.items()}

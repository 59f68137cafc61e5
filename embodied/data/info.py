"""``embodied data info DIR``: what a dataset folder holds, in either format.

    print(format_summary(summarize("data/pick_place")))

Episodes, frames (control steps), fps, every feature with its dtype and shape, the tasks with
their episode and frame counts, and the size on disk. Read from the metadata and the small
columns only: no image is decoded.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.data.demonstrations import detect_format
from embodied.data.format import Meta


@dataclass(frozen=True)
class FeatureSummary:
    name: str
    dtype: str
    shape: tuple[int, ...]
    note: str = ""  # e.g. the video codec


@dataclass
class DatasetSummary:
    """What ``embodied data info`` prints."""

    path: Path
    format: str  # e.g. "LeRobot v3.0"
    episodes: int
    frames: int  # control steps (executed sub-steps)
    rows: int  # stored rows: chunk steps (embodied's format) or frames (LeRobot)
    fps: float | None  # None: not recorded
    features: list[FeatureSummary]
    tasks: dict[str, tuple[int, int]]  # task -> (episodes, frames)
    disk_bytes: int
    details: dict[str, str] = field(default_factory=dict)  # env, robot type, chunk, expert, ...


def summarize(path: str | Path) -> DatasetSummary:
    """The summary of the dataset in ``path`` (``FileNotFoundError`` / ``ValueError`` if it is not one)."""
    path = Path(path)
    return _arrow(path) if detect_format(path) == "arrow" else _lerobot(path)


def format_summary(s: DatasetSummary) -> str:
    """The summary as the CLI prints it."""
    lines = [f"{s.path}: {s.format}",
             f"  episodes: {s.episodes}",
             f"  frames:   {s.frames}" + (f" ({s.rows} rows)" if s.rows != s.frames else ""),
             f"  fps:      {s.fps:g}" if s.fps is not None else "  fps:      not recorded (the collecting env's)",
             f"  disk:     {_size(s.disk_bytes)}"]
    lines += [f"  {k + ':':9s} {v}" for k, v in s.details.items()]
    width = max(len(f.name) for f in s.features)
    lines.append(f"  features ({len(s.features)}):")
    for f in s.features:
        lines.append(f"    {f.name:{width}s}  {f.dtype:8s} {str(f.shape):16s} {f.note}".rstrip())
    lines.append(f"  tasks ({len(s.tasks)}): episodes, frames")
    for task, (episodes, frames) in sorted(s.tasks.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"    {episodes:6d} {frames:8d}  {task}")
    return "\n".join(lines)


def _arrow(path: Path) -> DatasetSummary:
    from datasets import disable_progress_bars, load_from_disk

    from embodied.data.format import FORMAT_VERSION, read_meta

    disable_progress_bars()
    meta = read_meta(path)
    rows = load_from_disk(str(path))
    table = rows.with_format("arrow").select_columns(["episode_index", "task", "executed"])[:]
    episode = table.column("episode_index").to_numpy()
    frames_per_row = np.asarray(table.column("executed").combine_chunks().flatten().to_numpy(zero_copy_only=False),
                                dtype=bool).reshape(len(episode), -1).sum(1)
    tasks = table.column("task").to_pylist()
    first = np.r_[True, episode[1:] != episode[:-1]]  # rows are grouped by episode
    counts = {t: (0, 0) for t in dict.fromkeys(tasks)}
    for task, is_first, n in zip(tasks, first, frames_per_row):
        e, f = counts[task]
        counts[task] = (e + int(is_first), f + int(n))
    features = [FeatureSummary(name, *_hf_dtype_shape(feature)) for name, feature in rows.features.items()]
    details = {**_provenance(meta), "chunk": f"{meta.action_chunk} sub-steps a row"}
    return DatasetSummary(path, f"embodied Arrow (format version {FORMAT_VERSION})", meta.episodes,
                          int(frames_per_row.sum()), len(episode), None, features, counts, _disk(path), details)


def _lerobot(path: Path) -> DatasetSummary:
    from embodied.data.lerobot.layout import LeRobotInfo, read_episodes, read_parquet, read_tasks
    from embodied.data.lerobot.writer import EMBODIED_PATH

    info = LeRobotInfo.read(path)
    episodes, names = read_episodes(info), read_tasks(info)
    frames: Counter[int] = Counter()
    for file in dict.fromkeys(episodes.data_file):
        frames.update(read_parquet(path / file, ["task_index"]).column("task_index").to_numpy().tolist())
    per_task = Counter(t for tasks in episodes.tasks for t in dict.fromkeys(tasks))
    counts = {names.get(i, f"task_index {i}"): (per_task.get(names.get(i, ""), 0), n)
              for i, n in sorted(frames.items())}
    features = [FeatureSummary(f.name, f.dtype, f.shape, _camera_note(f.info) if f.is_camera else "")
                for f in info.features.values()]
    details = {"robot": str(info.robot_type)} if info.robot_type else {}
    if (path / EMBODIED_PATH).is_file():  # written by embodied collect: the env, expert and command
        details |= _provenance(Meta(**json.loads((path / EMBODIED_PATH).read_text())["meta"]))
    return DatasetSummary(path, f"LeRobot {info.version}", len(episodes.index), int(episodes.length.sum()),
                          int(episodes.length.sum()), float(info.fps), features, counts, _disk(path), details)


def _provenance(meta: Meta) -> dict[str, str]:
    return {"env": f"{meta.env_id} ({meta.obs_mode})",
            "expert": f"{meta.expert}, succeeded in {meta.successes_attempted}/{meta.episodes_attempted} run",
            "created": meta.created_by}


def _camera_note(info: dict[str, Any]) -> str:
    parts = [str(info[k]) for k in ("video.codec", "video.pix_fmt") if k in info]
    return " ".join(parts) + (" depth" if info.get("is_depth_map") or info.get("video.is_depth_map") else "")


def _hf_dtype_shape(feature: Any) -> tuple[str, tuple[int, ...]]:
    """dtype and shape of a ``datasets`` feature (Value, fixed-length List/Sequence, ArrayND)."""
    shape: list[int] = []
    while hasattr(feature, "feature") and hasattr(feature, "length"):  # List / Sequence of a fixed length
        shape.append(feature.length)
        feature = feature.feature
    if hasattr(feature, "shape"):  # Array2D, Array3D
        return str(feature.dtype), (*shape, *feature.shape)
    return str(getattr(feature, "dtype", type(feature).__name__)), tuple(shape)


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024:
            break
    return f"{n:.1f} {unit}"

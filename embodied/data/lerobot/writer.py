"""Write recorded episodes as a LeRobot v3.0 folder (``embodied collect ... --format lerobot``).

    write_lerobot(Path("data/pick_color"), episodes, meta, fps=20)

Rows are frames, one per control step, so the episodes must be recorded with action chunk 1
(``collect`` does so for this format; the scripted experts pick every sub-action from the state
then, so the behaviour is the same as at any chunk). Features, named as LIBERO's LeRobot datasets
name them (so the reader's defaults and LeRobot policies trained on LIBERO find them):

| feature | dtype, shape | from |
|---|---|---|
| ``observation.state`` | float32 (S,) | ``states`` |
| ``observation.images.image`` | video (H, W, 3) | ``main_images`` |
| ``observation.images.wrist_image`` | video (H, W, 3) | ``wrist_images`` |
| ``action`` | float32 (A,) | the action executed at the frame |
| ``next.reward``, ``next.done`` | float32, bool (1,) | the step's reward; the episode's last frame |
| ``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index`` | LeRobot's own | |

Cameras are encoded as LeRobot's writer encodes them by default: AV1 (libsvtav1, CRF 30, preset
12), yuv420p, a keyframe every 2 frames, all episodes of a camera one after the other in one mp4
(a new file past ``video_mb``; data parquet files past ``data_mb``, one row group per episode).
``meta/embodied.json`` keeps what LeRobot has no field for (env, expert, seeds, successes).
Episodes are written one at a time as they come (``lerobot_writer``, ``LeRobotWriter``; ``collect``
hands each over as its round ends), keeping only a small record per episode for ``meta/``.
Everything is written into a temp folder renamed when complete: a killed write leaves nothing, and one
that fills the disk leaves nothing either and raises ``DiskFullError`` naming the folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied.core.atomic import atomic_dir, disk_full, disk_full_error
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.data.format import DemoEpisode, Meta, Tally, arrow_array, finished_or_aborted
from embodied.data.lerobot import stats
from embodied.data.lerobot.layout import (CHUNKS_SIZE, DATA_PATH, EPISODES_PATH, INDEX_FEATURES, INFO_PATH, STATS_PATH,
                                          TASKS_PATH, V3, VIDEO_PATH)
from embodied.data.lerobot.video import AV1, VideoCodec, VideoEncoder, probe

FEATURE_NAMES = {STATES: "observation.state", MAIN_IMAGES: "observation.images.image",
                 WRIST_IMAGES: "observation.images.wrist_image", "actions": "action"}
EMBODIED_PATH = "meta/embodied.json"
MB = 2**20


@dataclass(frozen=True)
class FileLimits:
    """When a data or video file is full and the next episode starts a new one (LeRobot's defaults)."""

    data_mb: float = 100.0
    video_mb: float = 200.0
    chunks_size: int = CHUNKS_SIZE  # files per chunk-NNN folder


def write_lerobot(out: Path, episodes: Iterable[DemoEpisode], meta: Meta, fps: int, codec: VideoCodec = AV1,
                  limits: FileLimits = FileLimits()) -> Path:
    """Write ``episodes`` (recorded at action chunk 1) into the folder ``out`` atomically, one at a time
    (``lerobot_writer``: an iterator is never held whole)."""
    if isinstance(episodes, Sized) and not len(episodes):
        raise ValueError(f"no episodes to write to {str(out)!r}")
    with lerobot_writer(Path(out), meta, fps, codec, limits) as writer:
        for ep in episodes:
            writer.add(ep)
        writer.finish(meta)
    return Path(out)


@contextmanager
def lerobot_writer(out: Path, meta: Meta, fps: int, codec: VideoCodec = AV1,
                   limits: FileLimits = FileLimits()) -> Iterator[LeRobotWriter]:
    """A ``LeRobotWriter`` into a temp folder beside ``out``, renamed onto ``out`` when the block ends after
    ``finish``; on any error (or Ctrl-C) its open files are dropped and the temp folder goes. A full disk
    raises ``DiskFullError`` naming ``out`` (how much the videos need is not known before they are encoded)."""
    out = Path(out)
    try:
        with atomic_dir(out) as tmp:
            writer = LeRobotWriter(tmp, meta, fps, codec, limits)
            with finished_or_aborted(writer, f"LeRobot dataset {str(out)!r}"):
                yield writer
    except OSError as exc:
        if disk_full(exc, out):
            raise disk_full_error("LeRobot dataset", out, exc) from exc
        raise


class LeRobotWriter:
    """Episodes written into a LeRobot folder as they come: rows into the data parquet files, frames into the
    camera mp4s, a small record per episode kept for ``meta/``. Memory holds one episode and the encoders'
    state, however many episodes the folder gets. Open it with ``lerobot_writer``."""

    def __init__(self, folder: Path, meta: Meta, fps: int, codec: VideoCodec = AV1,
                 limits: FileLimits = FileLimits()) -> None:
        self.folder, self.layout, self.fps, self.codec, self.limits = folder, meta, fps, codec, limits
        self.cameras = [k for k in (MAIN_IMAGES, WRIST_IMAGES) if k in meta.obs_keys]
        self.features = _features(meta)
        self.data = _DataFiles(folder, self.features, limits)
        self.videos = {k: _VideoFiles(folder, FEATURE_NAMES[k], fps, codec, limits) for k in self.cameras}
        self.tasks: dict[str, int] = {}  # task -> task_index, in order of first appearance
        self.records: list[tuple[dict[str, Any], dict[str, stats.Stats]]] = []  # per episode: meta/episodes row, stats
        self.tally = Tally()
        self.finished = False

    def add(self, ep: DemoEpisode) -> None:
        """Write one episode's rows and frames."""
        if ep.actions.shape[1] != 1:
            raise ValueError(f"LeRobot rows are control steps: record the episodes with action chunk 1, not "
                             f"{ep.actions.shape[1]}")
        for key in self.cameras:
            if list(ep.obs[key].shape[1:]) != list(self.layout.image_shapes[key]):
                raise ValueError(f"episode {self.tally.episodes}: {key} are {ep.obs[key].shape[1:]}, the dataset's "
                                 f"{tuple(self.layout.image_shapes[key])}")
        e, first = self.tally.episodes, self.tally.rows
        task = self.tasks.setdefault(ep.task, len(self.tasks))
        columns = _columns(ep, e, first, task, self.fps, self.layout)
        record = {"episode_index": e, "tasks": [ep.task], "length": ep.length, **self.data.write(columns, first)}
        for key, files in self.videos.items():
            record |= files.write(ep.obs[key])
        self.records.append((record, _episode_stats(columns, {FEATURE_NAMES[k]: ep.obs[k] for k in self.videos})))
        self.tally.add(ep)

    def finish(self, meta: Meta) -> None:
        """Close the data and video files, then write ``meta/`` (``meta`` must count what was written)."""
        if not self.tally.episodes:
            raise ValueError(f"no episodes to write to {str(self.folder)!r}")
        self.tally.check(meta, self.folder)
        self.data.close()
        for files in self.videos.values():
            files.close()
        for key in self.cameras:
            self.features[FEATURE_NAMES[key]]["info"] = self.codec.feature_info(probe(self.videos[key].first_path))
        _write_meta(self.folder, self.records, self.tasks, self.features, self.fps, meta, self.tally, self.limits)
        self.finished = True

    def abort(self) -> None:
        """Drop the open files after a failed write (the folder is about to be removed)."""
        for files in (self.data, *self.videos.values()):
            files.abort()


def _features(meta: Meta) -> dict[str, dict[str, Any]]:
    """``features`` of ``meta/info.json``: ours, then LeRobot's index columns."""
    out: dict[str, dict[str, Any]] = {}
    if meta.state_dim:
        out[FEATURE_NAMES[STATES]] = {"dtype": "float32", "shape": [meta.state_dim], "names": None}
    for key in (MAIN_IMAGES, WRIST_IMAGES):
        if key in meta.obs_keys:
            out[FEATURE_NAMES[key]] = {"dtype": "video", "shape": list(meta.image_shapes[key]),
                                       "names": ["height", "width", "channels"], "info": {}}
    out[FEATURE_NAMES["actions"]] = {"dtype": "float32", "shape": [meta.action_dim], "names": None}
    out["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    out["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    return out | json.loads(json.dumps(INDEX_FEATURES))


def _columns(ep: DemoEpisode, episode: int, first: int, task: int, fps: int, meta: Meta) -> dict[str, np.ndarray]:
    """The episode's frames as the data parquet's columns (cameras are in the videos)."""
    n = ep.length
    cols: dict[str, np.ndarray] = {}
    if meta.state_dim:
        cols[FEATURE_NAMES[STATES]] = ep.obs[STATES].astype(np.float32)
    cols[FEATURE_NAMES["actions"]] = ep.actions[:, 0].astype(np.float32)
    cols["next.reward"] = ep.rewards[:, 0].astype(np.float32)
    cols["next.done"] = np.arange(n) == n - 1
    cols["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    cols["frame_index"] = np.arange(n, dtype=np.int64)
    cols["episode_index"] = np.full(n, episode, dtype=np.int64)
    cols["index"] = np.arange(first, first + n, dtype=np.int64)
    cols["task_index"] = np.full(n, task, dtype=np.int64)
    return cols


def _episode_stats(columns: dict[str, np.ndarray], frames: dict[str, np.ndarray]) -> dict[str, stats.Stats]:
    out = {name: stats.vector_stats(values) for name, values in columns.items()}
    return out | {name: stats.image_stats(images) for name, images in frames.items()}


def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class _DataFiles:
    """The data parquet files, filled episode by episode (one row group each)."""

    def __init__(self, root: Path, features: dict[str, dict[str, Any]], limits: FileLimits) -> None:
        self.root, self.limits = root, limits
        self.schema = _hf_features(features).arrow_schema
        self.chunk = self.file = 0
        self._writer: Any = None
        self._path = root

    def write(self, columns: dict[str, np.ndarray], first: int) -> dict[str, int]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is not None and self._path.stat().st_size >= self.limits.data_mb * MB:
            self.close()
            self.chunk, self.file = _next_file(self.chunk, self.file, self.limits.chunks_size)
        if self._writer is None:
            self._path = self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._path, self.schema, compression="snappy", use_dictionary=True)
        arrays = [arrow_array(columns[name], field.type) for name, field in zip(self.schema.names, self.schema)]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        n = len(columns["index"])
        return {"data/chunk_index": self.chunk, "data/file_index": self.file, "dataset_from_index": first,
                "dataset_to_index": first + n}

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def abort(self) -> None:
        """Drop the open file after a failed write (its folder is about to be removed)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):  # a full disk fails the footer too; the first error is the one
                writer.close()


class _VideoFiles:
    """One camera's mp4 files, episodes appended one after the other."""

    def __init__(self, root: Path, key: str, fps: int, codec: VideoCodec, limits: FileLimits) -> None:
        self.root, self.key, self.fps, self.codec, self.limits = root, key, fps, codec, limits
        self.chunk = self.file = 0
        self._encoder: VideoEncoder | None = None
        self.first_path = root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)

    def write(self, frames: np.ndarray) -> dict[str, float | int]:
        if self._encoder is not None and self._encoder.size_bytes >= self.limits.video_mb * MB:
            self._encoder.close()
            self._encoder = None
            self.chunk, self.file = _next_file(self.chunk, self.file, self.limits.chunks_size)
        if self._encoder is None:
            path = self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)
            self._encoder = VideoEncoder(path, self.fps, self.codec)
        start = self._encoder.frames
        for frame in frames:
            self._encoder.add(frame)
        prefix = f"videos/{self.key}/"
        return {prefix + "chunk_index": self.chunk, prefix + "file_index": self.file,
                prefix + "from_timestamp": start / self.fps, prefix + "to_timestamp": self._encoder.frames / self.fps}

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()

    def abort(self) -> None:
        """Drop the open mp4 after a failed write (its folder is about to be removed)."""
        encoder, self._encoder = self._encoder, None
        if encoder is not None:
            encoder.abort()


def _write_meta(root: Path, records: list[tuple[dict[str, Any], dict[str, stats.Stats]]], tasks: dict[str, int],
                features: dict[str, dict[str, Any]], fps: int, meta: Meta, tally: Tally, limits: FileLimits) -> None:
    """``meta/``: episodes parquet, tasks parquet, stats.json, info.json, embodied.json."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for record, episode_stats in records:
        flat = {f"stats/{name}/{k}": np.asarray(v).tolist() for name, s in episode_stats.items() for k, v in s.items()}
        rows.append(record | flat | {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    # As LeRobot: a pandas frame of task_index indexed by the task string.
    pd.DataFrame({"task_index": list(tasks.values())}, index=pd.Index(list(tasks), name="task")).to_parquet(
        root / TASKS_PATH)
    total = stats.to_json({name: stats.aggregate([s[name] for _, s in records]) for name in records[0][1]})
    (root / STATS_PATH).write_text(json.dumps(total, indent=4) + "\n")
    info = {"codebase_version": V3, "fps": fps, "features": features, "total_episodes": tally.episodes,
            "total_frames": tally.rows, "total_tasks": len(tasks), "chunks_size": limits.chunks_size,
            "data_files_size_in_mb": max(1, round(limits.data_mb)),
            "video_files_size_in_mb": max(1, round(limits.video_mb)),
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if any(f["dtype"] == "video" for f in features.values())
            else None, "robot_type": meta.env_id, "splits": {"train": f"0:{tally.episodes}"}}
    (root / INFO_PATH).write_text(json.dumps(info, indent=4) + "\n")
    provenance = {"meta": dataclasses.asdict(meta), "episode_seeds": tally.seeds, "episode_success": tally.success}
    (root / EMBODIED_PATH).write_text(json.dumps(provenance, indent=1) + "\n")


def _hf_features(features: dict[str, dict[str, Any]]) -> Any:
    """The ``datasets.Features`` of the data parquet, as LeRobot's ``get_hf_features_from_features`` builds them
    (their schema metadata is what ``datasets`` reads the files back with)."""
    from datasets import Features, Sequence, Value

    out = {}
    for name, spec in features.items():
        if spec["dtype"] == "video":
            continue
        shape = tuple(spec["shape"])
        out[name] = Value(spec["dtype"]) if shape == (1,) else Sequence(Value(spec["dtype"]), length=shape[0])
    return Features(out)

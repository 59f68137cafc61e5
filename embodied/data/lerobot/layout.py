"""LeRobot's on-disk layout: ``meta/info.json``, the episodes table, the tasks, the parquet files.

A v3.0 folder (LeRobot >= 0.4; what ``embodied collect --format lerobot`` writes)::

    meta/info.json                       codebase_version "v3.0", fps, features, path templates
    meta/stats.json                      per feature: min, max, mean, std, count, q01 .. q99
    meta/tasks.parquet                   task_index, indexed by the task string
    meta/episodes/chunk-000/file-000.parquet
        one row per episode: episode_index, tasks, length, data/chunk_index, data/file_index,
        dataset_from_index, dataset_to_index, videos/<key>/{chunk_index, file_index,
        from_timestamp, to_timestamp}, stats/<feature>/<stat>, meta/episodes/{chunk_index, file_index}
    data/chunk-000/file-000.parquet      one row per frame, many episodes per file
    videos/<key>/chunk-000/file-000.mp4  one camera, many episodes per file (each from its from_timestamp)

A v2.0 / v2.1 folder keeps one parquet and one mp4 per episode (``data_path`` and ``video_path``
format ``episode_chunk`` and ``episode_index``), ``meta/episodes.jsonl`` and ``meta/tasks.jsonl``;
reading it costs only a second way of building the episodes table, so it is read too.

Every problem is a ``LeRobotError`` naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

V3 = "v3.0"
SUPPORTED_VERSIONS = ("v2.0", "v2.1", V3)
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
LEGACY_EPISODES_PATH = "meta/episodes.jsonl"
LEGACY_TASKS_PATH = "meta/tasks.jsonl"
CHUNKS_SIZE = 1000  # files per chunk folder
# The columns LeRobot adds to every frame (its DEFAULT_FEATURES).
INDEX_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
CAMERA_DTYPES = ("video", "image")


class LeRobotError(ValueError):
    """A LeRobot folder this reader cannot use; the message names the file and the field."""


@dataclass(frozen=True)
class Feature:
    """One entry of ``features`` in ``meta/info.json``."""

    name: str
    dtype: str  # float32, int64, bool, string, video, image, ...
    shape: tuple[int, ...]
    info: dict[str, Any] = field(default_factory=dict)
    names: Any = None  # axis or dimension names, as info.json gives them (a list, a dict, or null)

    @property
    def is_camera(self) -> bool:
        return self.dtype in CAMERA_DTYPES

    @property
    def is_depth(self) -> bool:
        """A depth map (LeRobot marks it ``is_depth_map``, formerly ``video.is_depth_map``)."""
        return bool(self.info.get("is_depth_map") or self.info.get("video.is_depth_map"))

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of a camera, whether ``shape`` is channels-last (LeRobot's writers since v2) or
        channels-first (``names`` starting with "channels", as some converted datasets have it)."""
        first = self.names[0] if isinstance(self.names, (list, tuple)) and self.names else None
        if len(self.shape) == 3 and first in ("channels", "channel", "c"):
            return self.shape[1], self.shape[2], self.shape[0]
        return self.shape  # type: ignore[return-value]

    def describe(self) -> str:
        """``name dtype (shape)``, as error messages and ``embodied data info`` list features."""
        extra = f" {self.info['video.codec']}" if self.dtype == "video" and "video.codec" in self.info else ""
        return f"{self.name} {self.dtype}{extra} {tuple(self.shape)}{' depth' if self.is_depth else ''}"


@dataclass
class LeRobotInfo:
    """``meta/info.json`` of a LeRobot folder."""

    root: Path
    version: str  # codebase_version
    fps: int
    features: dict[str, Feature]
    total_episodes: int
    total_frames: int
    data_path: str  # template of the data parquet paths
    video_path: str | None  # template of the video paths (None: no video features)
    chunks_size: int = CHUNKS_SIZE
    robot_type: str | None = None

    @classmethod
    def read(cls, root: Path) -> LeRobotInfo:
        """Parse and check ``root/meta/info.json``."""
        path = Path(root) / INFO_PATH
        if not path.is_file():
            what = "does not exist" if not Path(root).exists() else f"has no {INFO_PATH}: it is not a LeRobot dataset"
            raise LeRobotError(f"{root} {what}")
        try:
            raw = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LeRobotError(f"{path}: not valid JSON ({exc})") from None
        version = raw.get("codebase_version")
        if version not in SUPPORTED_VERSIONS:
            raise LeRobotError(f"{path}: codebase_version {version!r} is not one this reader reads "
                               f"({', '.join(SUPPORTED_VERSIONS)}); LeRobot's conversion scripts bring "
                               "older datasets to v3.0")
        missing = [k for k in ("fps", "features", "data_path") if k not in raw]
        if missing:
            raise LeRobotError(f"{path}: lacks {', '.join(missing)}")
        if not isinstance(raw["fps"], (int, float)) or raw["fps"] <= 0:
            raise LeRobotError(f"{path}: fps must be a positive number, got {raw['fps']!r}")
        features = {}
        for name, spec in raw["features"].items():
            if not isinstance(spec, dict) or "dtype" not in spec or "shape" not in spec:
                raise LeRobotError(f"{path}: features.{name} needs a dtype and a shape, got {spec!r}")
            features[name] = Feature(name, spec["dtype"], tuple(int(n) for n in spec["shape"]),
                                     dict(spec.get("info") or spec.get("video_info") or {}), spec.get("names"))
        if any(f.dtype == "video" for f in features.values()) and not raw.get("video_path"):
            raise LeRobotError(f"{path}: has video features but no video_path")
        return cls(Path(root), version, raw["fps"], features, int(raw.get("total_episodes", 0)),
                   int(raw.get("total_frames", 0)), raw["data_path"], raw.get("video_path"),
                   int(raw.get("chunks_size", CHUNKS_SIZE)), raw.get("robot_type"))

    def listing(self) -> str:
        """Every feature with its dtype and shape, one per line (for error messages)."""
        return "\n  ".join(f.describe() for f in self.features.values())


@dataclass
class Episodes:
    """Where each episode lives: one entry per episode, in ``episode_index`` order."""

    index: np.ndarray  # int64 [E]: episode_index
    length: np.ndarray  # int64 [E]: frames
    tasks: list[list[str]]  # the episode's tasks (LeRobot lists them per episode)
    data_file: list[str]  # relative path of the parquet holding its frames
    video_file: dict[str, list[str]]  # video key -> relative path of the mp4 holding its frames
    from_timestamp: dict[str, np.ndarray]  # video key -> float64 [E]: where the episode starts in that mp4
    to_timestamp: dict[str, np.ndarray]
    source: str  # the file that lists them (errors name it)


def read_episodes(info: LeRobotInfo) -> Episodes:
    """The episodes table of a v3 folder (``meta/episodes/*/*.parquet``) or a v2 one (``episodes.jsonl``)."""
    return _episodes_v3(info) if info.version == V3 else _episodes_v2(info)


def _episodes_v3(info: LeRobotInfo) -> Episodes:
    files = sorted((info.root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        raise LeRobotError(f"{info.root / EPISODES_DIR}: no episodes parquet (chunk-*/file-*.parquet)")
    import pyarrow as pa

    tables = [read_parquet(f) for f in files]
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowInvalid as exc:
        raise LeRobotError(f"{info.root / EPISODES_DIR}: its parquet files do not share columns ({exc})") from None
    source = str(files[0].relative_to(info.root)) if len(files) == 1 else f"{EPISODES_DIR}/*/*.parquet"
    rows = {name: _column(table, name, source) for name in ("episode_index", "length", "data/chunk_index",
                                                             "data/file_index")}
    order = np.argsort(rows["episode_index"], kind="stable")
    rows = {k: v[order] for k, v in rows.items()}
    tasks = _column(table, "tasks", source)[order] if "tasks" in table.column_names else None
    videos = [k for k, f in info.features.items() if f.dtype == "video"]
    video_file, starts, ends = {}, {}, {}
    for key in videos:
        c, i, start, end = (_column(table, f"videos/{key}/{n}", source)[order]
                            for n in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"))
        video_file[key] = [info.video_path.format(video_key=key, chunk_index=int(a), file_index=int(b))
                           for a, b in zip(c, i)]
        starts[key], ends[key] = start.astype(np.float64), end.astype(np.float64)
    data_file = [info.data_path.format(chunk_index=int(c), file_index=int(i))
                 for c, i in zip(rows["data/chunk_index"], rows["data/file_index"])]
    return Episodes(rows["episode_index"].astype(np.int64), rows["length"].astype(np.int64),
                    [list(t) for t in tasks] if tasks is not None else [[] for _ in order], data_file, video_file,
                    starts, ends, source)


def _episodes_v2(info: LeRobotInfo) -> Episodes:
    lines = _jsonl(info.root / LEGACY_EPISODES_PATH)
    for n, line in enumerate(lines):
        missing = [k for k in ("episode_index", "length") if k not in line]
        if missing:
            raise LeRobotError(f"{info.root / LEGACY_EPISODES_PATH}: line {n + 1} lacks {', '.join(missing)}")
    lines.sort(key=lambda line: line["episode_index"])
    index = np.array([line["episode_index"] for line in lines], dtype=np.int64)
    length = np.array([line["length"] for line in lines], dtype=np.int64)
    chunk = index // info.chunks_size
    videos = [k for k, f in info.features.items() if f.dtype == "video"]
    data_file = [info.data_path.format(episode_chunk=int(c), episode_index=int(e)) for c, e in zip(chunk, index)]
    video_file = {k: [info.video_path.format(episode_chunk=int(c), video_key=k, episode_index=int(e))
                      for c, e in zip(chunk, index)] for k in videos}
    starts = {k: np.zeros(len(index)) for k in videos}  # one mp4 per episode, from 0 s
    ends = {k: length / info.fps for k in videos}
    return Episodes(index, length, [list(line.get("tasks", [])) for line in lines], data_file, video_file, starts,
                    ends, LEGACY_EPISODES_PATH)


def read_tasks(info: LeRobotInfo) -> dict[int, str]:
    """task_index -> task string, from ``meta/tasks.parquet`` (v3) or ``meta/tasks.jsonl`` (v2)."""
    if info.version != V3:
        lines = _jsonl(info.root / LEGACY_TASKS_PATH)
        try:
            return {int(line["task_index"]): str(line["task"]) for line in lines}
        except KeyError as exc:
            raise LeRobotError(f"{info.root / LEGACY_TASKS_PATH}: a line lacks {exc}") from None
    path = info.root / TASKS_PATH
    table = read_parquet(path)
    # pandas writes the index (the task string) as a column named after it, "task" in LeRobot's files.
    name = next((n for n in ("task", "__index_level_0__") if n in table.column_names), None)
    if name is None or "task_index" not in table.column_names:
        raise LeRobotError(f"{path}: needs a task_index column and the task strings (column or index 'task'); "
                           f"it has {', '.join(table.column_names)}")
    indices = _column(table, "task_index", TASKS_PATH)
    return {int(i): str(t) for i, t in zip(indices, table.column(name).to_pylist())}


def read_parquet(path: Path, columns: list[str] | None = None) -> Any:
    """A parquet file as a pyarrow Table; a missing, corrupt or truncated file is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise LeRobotError(f"{path}: missing")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise LeRobotError(f"{path}: not a readable parquet file ({exc})") from None


def parquet_columns(path: Path) -> list[str]:
    """The column names of a parquet file (its footer only); a missing or corrupt file is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise LeRobotError(f"{path}: missing")
    try:
        return pq.read_schema(path).names
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise LeRobotError(f"{path}: not a readable parquet file ({exc})") from None


def _column(table: Any, name: str, source: str) -> np.ndarray:
    if name not in table.column_names:
        raise LeRobotError(f"{source}: no column {name!r} (it has {', '.join(table.column_names)})")
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise LeRobotError(f"{path}: missing")
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise LeRobotError(f"{path}: not valid JSON lines ({exc})") from None

"""``LeRobotDemos``: a LeRobot folder (v3.0, or v2.x) as demonstrations for SFT.

    data = LeRobotDemos("data/libero", action_chunk=8)        # features looked up by their usual names
    data.fit(spec, action_chunk=8, needed={"images"})         # the env's keys and image sizes; checks dims
    sample = data[0]                                          # DemoSample: obs, actions [8, A], executed [8]

LeRobot stores one row per frame (control step). A sample here is one frame: what the robot saw
then (``states``, camera images resized to the env's, the task string from ``meta/tasks.parquet``)
and the C actions from that frame on, within its episode: past the episode's end they are 0 and
``executed`` is False, as LeRobot's ``action_is_pad`` marks them. So a dataset read with chunk C
gives one sample per frame, the C-step chunks overlapping.

States, actions and indices are read once into numpy arrays (a few bytes per frame). Camera
frames are decoded lazily, when a sample asks for them: video frames by timestamp (the episode's
``from_timestamp`` in its mp4 plus the frame's ``timestamp``), images stored in the parquet a row
group at a time. Decoded frames go into a cache bounded in bytes (``frame_cache_mb``), the least
recently used dropped first, so a dataset far larger than memory trains in bounded memory.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs
from embodied.data.dataset import DemoSample
from embodied.data.lerobot.layout import (Episodes, Feature, LeRobotError, LeRobotInfo, parquet_columns, read_episodes,
                                          read_parquet, read_tasks)
from embodied.data.lerobot.mapping import ACTIONS, CAMERA_KEYS, Resolved, require, resolve
from embodied.data.lerobot.video import FrameError, VideoPool, probe

if TYPE_CHECKING:
    from embodied.policy.base import PolicySpec

OBS_KEYS = (STATES, MAIN_IMAGES, WRIST_IMAGES)
INDEX_COLUMNS = ("episode_index", "frame_index", "timestamp", "task_index")
REWARD_FEATURE, REWARDS = "next.reward", "rewards"  # LeRobot's per-frame reward, and our key for it


class FrameCache:
    """Decoded camera frames, at most ``max_bytes`` split evenly between the cameras; the least
    recently used frame of a camera makes room for its next one.

    Each camera's frames live in one block allocated at its first frame's size (a single large
    allocation, untouched pages cost nothing), not in an array each: a run's millions of small
    allocations interleaved with long-lived ones would fragment the heap, and the process would
    grow epoch after epoch with the cache itself at its bound. ``get`` returns a copy, so a sample
    never changes when its slot is reused.
    """

    def __init__(self, max_bytes: int, keys: Iterable[str]) -> None:
        self.max_bytes, self.keys = max_bytes, list(keys)
        self.peak_bytes = 0
        self._blocks: dict[str, np.ndarray] = {}
        self._slots: dict[str, OrderedDict[int, int]] = {k: OrderedDict() for k in self.keys}

    def get(self, key: str, i: int) -> np.ndarray | None:
        slot = self._slots[key].get(i)
        if slot is None:
            return None
        self._slots[key].move_to_end(i)
        return self._blocks[key][slot].copy()

    def put(self, key: str, i: int, frame: np.ndarray) -> None:
        block = self._blocks.get(key)
        if block is None:
            capacity = self.max_bytes // max(len(self.keys), 1) // frame.nbytes
            block = self._blocks[key] = np.empty((capacity, *frame.shape), frame.dtype)
        slots = self._slots[key]
        if not len(block) or frame.shape != block.shape[1:]:  # no room at all, or not the camera's size
            return
        slot = slots.popitem(last=False)[1] if len(slots) == len(block) else len(slots)
        block[slot] = frame
        slots[i] = slot
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    @property
    def bytes(self) -> int:
        """Bytes of the frames held."""
        return sum(len(self._slots[k]) * self._blocks[k][0].nbytes for k in self._blocks if len(self._blocks[k]))

    def __len__(self) -> int:
        return sum(len(slots) for slots in self._slots.values())


class LeRobotDemos(torch.utils.data.Dataset):
    """The frames of a LeRobot folder as ``DemoSample``s (see the module docstring).

    ``features`` maps embodied's keys to the dataset's feature names (``sft.features``; a key left
    out is looked up among the usual names, see ``embodied.data.lerobot.mapping``). ``fit`` picks
    the observation keys the env gives and resizes images to its size; before it, a sample holds
    every key found, images as stored. ``episode_indices`` and ``steps`` are per frame.
    """

    def __init__(self, path: str | Path, action_chunk: int = 1, features: Mapping[str, str | None] | None = None,
                 frame_cache_mb: float = 1024.0) -> None:
        self.path = Path(path)
        self.info = LeRobotInfo.read(self.path)
        self.fps: float | None = float(self.info.fps)
        self.action_chunk = action_chunk
        self.resolved: dict[str, Resolved] = resolve(self.info, features or {})
        self.action_feature: Feature = require(self.info, self.resolved[ACTIONS])
        self.episodes: Episodes = read_episodes(self.info)
        self.task_names = read_tasks(self.info)
        self._read_rows()
        self._check_tasks()
        self._check_videos([self.resolved[k].feature for k in CAMERA_KEYS if self.resolved[k].feature is not None])
        self.obs_keys: list[str] = [k for k in OBS_KEYS if self.resolved[k].feature is not None]
        self.image_sizes: dict[str, tuple[int, int]] = {}  # camera key -> (H, W) of the samples (fit sets them)
        self._cache_bytes = int(frame_cache_mb * 2**20)
        self.cache = FrameCache(self._cache_bytes, [k for k in CAMERA_KEYS if k in self.obs_keys])
        self.videos = VideoPool(self.fps)
        self._images = ParquetImages(self.path)

    # -- the demonstrations interface (embodied.data.demonstrations.Demonstrations) ----------------

    chunk_rows = False  # a row per frame; its chunk is built from the frames after it

    @property
    def rewards(self) -> np.ndarray | None:
        """float32 [N, C]: the ``next.reward`` of the frames each chunk runs, 0 past the episode's end (None: the
        folder has no ``next.reward`` feature; RLPD then gives a sparse success reward)."""
        per_frame = self._vectors.get(REWARDS)
        if per_frame is None:
            return None
        frames = np.arange(len(self))[:, None] + np.arange(self.action_chunk)
        executed = frames < self._end[:, None]
        return np.where(executed, per_frame[np.minimum(frames, self._end[:, None] - 1), 0], 0.0).astype(np.float32)

    @property
    def episode_success(self) -> np.ndarray | None:
        """bool [N]: each frame's episode succeeded, from ``meta/embodied.json`` (written by ``embodied collect``;
        LeRobot has no field for it), else None."""
        from embodied.data.lerobot.writer import EMBODIED_PATH

        provenance = self.path / EMBODIED_PATH
        if not provenance.is_file():
            return None
        success = json.loads(provenance.read_text()).get("episode_success")
        if success is None or len(success) <= int(self.episodes.index.max()):
            return None
        return np.asarray(success, dtype=bool)[self.episode_indices]

    @property
    def episode_indices(self) -> np.ndarray:
        """int64 [N]: the episode (its ``episode_index``) of every frame."""
        return self.episodes.index[self._episode]

    @property
    def steps(self) -> np.ndarray:
        """int64 [N]: each frame's position in its episode (0 = the episode's first)."""
        return np.arange(len(self._episode)) - self._start

    def __len__(self) -> int:
        return len(self._episode)

    def __getitem__(self, i: int) -> DemoSample:
        i = int(i)
        obs: Obs = {}
        if STATES in self.obs_keys:
            obs[STATES] = self._vectors[STATES][i]
        for key in CAMERA_KEYS:
            if key in self.obs_keys:
                obs[key] = self._frame(key, i)
        obs[TASK_DESCRIPTIONS] = self.task_names[int(self._task_index[i])]
        steps = i + np.arange(self.action_chunk)
        executed = steps < self._end[i]
        actions = np.where(executed[:, None], self._vectors[ACTIONS][np.minimum(steps, self._end[i] - 1)], 0.0)
        return DemoSample(obs, torch.from_numpy(actions), torch.from_numpy(executed))

    def check(self, action_chunk: int, needed: Iterable[str]) -> None:
        """Fail (``LeRobotError``, listing the features) if a key the policy needs has no feature."""
        self.action_chunk = action_chunk
        for key in _obs_keys(needed):
            require(self.info, self.resolved[key])

    def fit(self, spec: PolicySpec, action_chunk: int, needed: Iterable[str]) -> None:
        """Read what the env gives (``spec``): its observation keys, images resized to its sizes;
        fail naming both sides if the action or state dimensions differ."""
        self.check(action_chunk, needed)
        gives = {STATES: spec.state_dim > 0, MAIN_IMAGES: spec.image_shape is not None,
                 WRIST_IMAGES: spec.wrist_image_shape is not None}
        left_out = {k for k, r in self.resolved.items() if r.explicit and r.feature is None}  # null in sft.features
        keys = [k for k in OBS_KEYS if gives[k] and k not in left_out]
        problems = []
        actions = self.action_feature.shape[0]
        if actions != spec.action_dim:
            problems.append(f"its actions ({self.action_feature.name}) have {actions} dimensions, "
                            f"the policy's (the env's) {spec.action_dim}")
        if STATES in keys:
            state = require(self.info, self.resolved[STATES]).shape[0]
            if state != spec.state_dim:
                problems.append(f"its states ({self.resolved[STATES].feature.name}) have {state} dimensions, "
                                f"the env's {spec.state_dim}")
        for key in CAMERA_KEYS:
            if key in keys:
                require(self.info, self.resolved[key])
        if problems:
            raise LeRobotError(f"dataset {self.path} does not fit the policy: " + "; ".join(problems))
        shapes = {MAIN_IMAGES: spec.image_shape, WRIST_IMAGES: spec.wrist_image_shape}
        self.obs_keys = keys
        self.image_sizes = {k: tuple(shapes[k][:2]) for k in CAMERA_KEYS if k in keys}  # type: ignore[index, misc]
        self.cache = FrameCache(self._cache_bytes, [k for k in CAMERA_KEYS if k in keys])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a spawned ``DataLoader`` worker): without open videos or cached frames, which it makes anew."""
        state = self.__dict__.copy()
        state["videos"] = VideoPool(self.videos.fps, self.videos.max_open)
        state["cache"] = FrameCache(self._cache_bytes, self.cache.keys)
        state["_images"] = ParquetImages(self.path)
        return state

    # -- rows --------------------------------------------------------------------------------------

    def _read_rows(self) -> None:
        """Index columns and the mapped vectors of every frame, in (episode, frame) order."""
        cols = self._read_files()
        keep = np.isin(cols["episode_index"], self.episodes.index)
        order = np.lexsort((cols["frame_index"][keep], cols["episode_index"][keep]))
        cols = {k: v[keep][order] for k, v in cols.items()}
        self._episode = np.searchsorted(self.episodes.index, cols["episode_index"])  # position in self.episodes
        counts = np.bincount(self._episode, minlength=len(self.episodes.index))
        wrong = np.flatnonzero(counts != self.episodes.length)
        if len(wrong):
            p = wrong[0]
            raise LeRobotError(f"{self.path / self.episodes.data_file[p]}: episode {self.episodes.index[p]} has "
                               f"{counts[p]} rows, {self.episodes.source} gives it length {self.episodes.length[p]}")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._start, self._end = starts[self._episode], (starts + counts)[self._episode]
        self._timestamp = cols["timestamp"].astype(np.float64)
        self._task_index = cols["task_index"].astype(np.int64)
        self._file, self._row = cols["file"], cols["row"]
        self._vectors = {k: cols[k] for k in (STATES, ACTIONS, REWARDS) if k in cols}

    def _read_files(self) -> dict[str, np.ndarray]:
        """The columns needed from every data file, concatenated, with each row's file and row in it."""
        vectors = {k: self.resolved[k].feature for k in (STATES, ACTIONS) if self.resolved[k].feature is not None}
        if REWARD_FEATURE in self.info.features:  # RLPD's demo replay reads it (``rewards``)
            vectors[REWARDS] = self.info.features[REWARD_FEATURE]
        self._files = list(dict.fromkeys(self.episodes.data_file))
        parts: dict[str, list[np.ndarray]] = {name: [] for name in (*INDEX_COLUMNS, *vectors, "file", "row")}
        for n, name in enumerate(self._files):
            path, wanted = self.path / name, [*INDEX_COLUMNS, *(f.name for f in vectors.values())]
            present = parquet_columns(path)
            missing = [c for c in wanted if c not in present]
            if missing:
                raise LeRobotError(f"{path}: no column {missing[0]!r} (a feature of meta/info.json); the file has "
                                   f"{', '.join(present)}")
            table = read_parquet(path, wanted)
            for column in INDEX_COLUMNS:
                parts[column].append(np.asarray(table.column(column).to_numpy(zero_copy_only=False)))
            for key, feature in vectors.items():
                parts[key].append(_vector(table, feature, path))
            parts["file"].append(np.full(table.num_rows, n))
            parts["row"].append(np.arange(table.num_rows))
        return {k: np.concatenate(v) for k, v in parts.items()}

    def _check_tasks(self) -> None:
        unknown = sorted(set(np.unique(self._task_index).tolist()) - set(self.task_names))
        if unknown:
            where = "meta/tasks.parquet" if self.info.version == "v3.0" else "meta/tasks.jsonl"
            raise LeRobotError(f"{self.path / 'data'}: task_index {unknown[0]} is not in {self.path / where}")

    def _check_videos(self, cameras: list[Feature]) -> None:
        """Each mp4 has as many frames as the parquet rows of the episodes it holds, at the dataset's fps."""
        for key in (f.name for f in cameras if f.dtype == "video"):
            self._check_spans(key)
            held: dict[str, list[int]] = {}  # mp4 -> the positions of the episodes in it
            for p, name in enumerate(self.episodes.video_file[key]):
                held.setdefault(name, []).append(p)
            for name, positions in held.items():
                self._check_frame_count(key, name, positions)

    def _check_spans(self, key: str) -> None:
        """Each episode's stretch of video (from_timestamp to to_timestamp) is as long as its rows."""
        fps, e = self.info.fps, self.episodes
        spans = np.round((e.to_timestamp[key] - e.from_timestamp[key]) * fps).astype(np.int64)
        wrong = np.flatnonzero(spans != e.length)
        if len(wrong):
            p = wrong[0]
            raise LeRobotError(f"{self.path / e.video_file[key][p]}: episode {e.index[p]} spans {spans[p]} frames at "
                               f"{fps} fps (videos/{key}/from_timestamp {e.from_timestamp[key][p]:g} s to "
                               f"to_timestamp {e.to_timestamp[key][p]:g} s in {e.source}) but has {e.length[p]} "
                               "parquet rows")

    def _check_frame_count(self, key: str, name: str, positions: list[int]) -> None:
        """The mp4 ``name`` has as many frames as its episodes reach (its header's count)."""
        e = self.episodes
        expected = int(round(max(e.to_timestamp[key][positions]) * self.info.fps))
        try:
            frames = probe(self.path / name).frames
        except FrameError as exc:
            raise LeRobotError(str(exc)) from None
        if frames != expected:
            episodes = ", ".join(str(e.index[p]) for p in positions)
            raise LeRobotError(f"{self.path / name}: {frames} frames, but its episodes ({episodes}) have "
                               f"{int(e.length[positions].sum())} parquet rows and end at frame {expected} "
                               f"(videos/{key}/to_timestamp in {e.source}); the video does not match its parquet rows")

    # -- camera frames -----------------------------------------------------------------------------

    def _frame(self, key: str, i: int) -> np.ndarray:
        cached = self.cache.get(key, i)
        if cached is not None:
            return cached
        feature = self.resolved[key].feature
        assert feature is not None
        p = int(self._episode[i])
        if feature.dtype == "video":
            t = float(self.episodes.from_timestamp[feature.name][p] + self._timestamp[i])
            try:
                frame = self.videos.frame_at(self.path / self.episodes.video_file[feature.name][p], t)
            except FrameError as exc:
                raise LeRobotError(f"{exc} (episode {self.episodes.index[p]}, frame {i - self._start[i]}, "
                                   f"feature {feature.name})") from None
        else:
            frame = self._images.image(self._files[int(self._file[i])], int(self._row[i]), feature.name)
        frame = _resized(frame, self.image_sizes.get(key))
        self.cache.put(key, i, frame)
        return frame


class ParquetImages:
    """Camera features of dtype ``image``: PNG/JPEG bytes in the data parquet, read a row group
    (LeRobot writes one per episode) at a time, the last ``max_groups`` kept."""

    def __init__(self, root: Path, max_groups: int = 2) -> None:
        self.root, self.max_groups = root, max_groups
        self._groups: OrderedDict[tuple[str, str, int], list[Any]] = OrderedDict()
        self._offsets: dict[str, np.ndarray] = {}

    def image(self, file: str, row: int, column: str) -> np.ndarray:
        import io

        import pyarrow.parquet as pq
        from PIL import Image

        path = self.root / file
        if file not in self._offsets:
            meta = pq.ParquetFile(path).metadata
            self._offsets[file] = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        group = int(np.searchsorted(self._offsets[file], row, side="right") - 1)
        cells = self._groups.get((file, column, group))
        if cells is None:
            cells = pq.ParquetFile(path).read_row_group(group, columns=[column]).column(column).to_pylist()
            self._groups[(file, column, group)] = cells
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
        self._groups.move_to_end((file, column, group))
        cell = cells[row - int(self._offsets[file][group])]
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        if data is None and isinstance(cell, dict) and cell.get("path"):
            data = (self.root / cell["path"]).read_bytes()
        if data is None:
            raise LeRobotError(f"{path}: row {row} of {column} holds no image")
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _obs_keys(needed: Iterable[str]) -> list[str]:
    """Policy requirements (``PolicyConfig.required_observations``: ``images`` = main images) as obs keys."""
    keys = {MAIN_IMAGES if k == "images" else k for k in needed}
    return [k for k in OBS_KEYS if k in keys]


def _resized(frame: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    if size is None or frame.shape[:2] == tuple(size):
        return frame
    from PIL import Image

    return np.asarray(Image.fromarray(frame).resize((size[1], size[0]), Image.BILINEAR))


def _vector(table: Any, feature: Feature, path: Path) -> np.ndarray:
    """float32 [N, D] of a vector feature, stored as a fixed-size list, a list or (D = 1) a scalar."""
    import pyarrow as pa

    column, width = table.column(feature.name).combine_chunks(), feature.shape[0]
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or pa.types.is_fixed_size_list(column.type):
        if column.null_count:
            raise LeRobotError(f"{path}: column {feature.name!r} has empty rows")
        values = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        if values.size != width * len(column):
            raise LeRobotError(f"{path}: column {feature.name!r} does not hold {width} values per row "
                               f"(meta/info.json shape {feature.shape})")
        return values.reshape(len(column), width)
    if width != 1:
        raise LeRobotError(f"{path}: column {feature.name!r} holds one value per row, meta/info.json says shape "
                           f"{feature.shape}")
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, 1)

"""The on-disk format of demonstrations: a Hugging Face ``datasets`` folder plus ``meta.json``.

Why ``datasets``: the rows are Arrow files, memory-mapped when read, typed (images stay exact
uint8 arrays, actions float32), and any machine opens them with one call,
``datasets.load_from_disk(DIR)``, without this project. LeRobot's layout stores camera frames as
mp4 and needs its own reader (and a video decoder) to get them back; lossy video would also change
what SFT sees from what the policy sees in RL.

One row per chunk step of an episode (what the policy acted on, and the chunk the expert ran):

| column | type | meaning |
|---|---|---|
| ``episode_index`` | int64 | episode number within the dataset (0, 1, ... in seed order) |
| ``step`` | int32 | chunk step within the episode (0, 1, ...) |
| ``seed`` | int64 | the episode's reset seed (``env.reset(seed=...)`` replays it) |
| ``task`` | string | the instruction (``task_description``) |
| ``states`` | float32 [S] | state observation (obs modes ``state``, ``state+rgb``) |
| ``main_images``, ``wrist_images`` | uint8 [H, W, 3] (``Array3D``) | camera images (obs modes with ``rgb``) |
| ``actions`` | float32 [C, A] | the sub-actions executed in this chunk, 0 where not executed |
| ``executed`` | bool [C] | which sub-steps ran (an episode can end inside a chunk) |
| ``rewards`` | float32 [C] | reward of each sub-step, 0 where not executed |
| ``done`` | bool | the episode ended in this chunk (its last row) |
| ``success`` | bool | the episode succeeded (``info["success"]`` at some sub-step; repeated on its rows) |

``meta.json`` (``Meta``) beside the Arrow files: format version, env id, obs mode, episode length,
env kwargs, chunk length C, action dimension A and bounds, state dimension, image shapes, the
instructions, episode and success counts, the expert, the seed and what created the folder.
The folder is written under a temporary name and renamed when complete (``atomic_dir``): an
interrupted write, or one that fills the disk (``DiskFullError``, naming the folder), leaves nothing behind.

Writing streams (``dataset_writer``, ``DatasetWriter``): episodes are taken one at a time, every
``BATCH_MB`` of rows become an Arrow record batch (numpy buffers wrapped as Arrow arrays,
``arrow_array``, never Python objects) appended to the current file, and a file that holds
``SHARD_MB`` is closed for the next. The files, ``state.json`` and ``dataset_info.json`` are those
``Dataset.save_to_disk`` writes for that many shards, so readers see no difference between a
dataset written in one file and one written in many.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.core.atomic import atomic_dir, disk_full, disk_full_error
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES

FORMAT_VERSION = 1
META_FILE = "meta.json"
IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)
OBS_KEYS = (STATES, *IMAGE_KEYS)


@dataclass
class DemoEpisode:
    """One recorded episode of T chunk steps (``EnvWorker.collect_round`` makes them)."""

    seed: int  # the env's reset seed
    task: str  # the instruction
    success: bool  # info["success"] at some sub-step (as eval counts it)
    obs: dict[str, np.ndarray]  # per obs key [T, ...]: what a policy acted on at each chunk step
    actions: np.ndarray  # float32 [T, C, A], 0 where not executed
    executed: np.ndarray  # bool [T, C]
    rewards: np.ndarray  # float32 [T, C]

    @property
    def length(self) -> int:
        """T: chunk steps (rows)."""
        return len(self.actions)


@dataclass
class Meta:
    """``meta.json``: what a reader needs to know before it opens the rows."""

    env_id: str
    obs_mode: str
    max_episode_steps: int  # env sub-steps before truncation
    action_chunk: int  # C
    action_dim: int  # A
    action_low: list[float]  # the env's action bounds, per dimension
    action_high: list[float]
    state_dim: int  # S; 0 without states
    image_shapes: dict[str, list[int]]  # obs key -> [H, W, 3], for the image keys present
    episodes: int  # episodes in the dataset
    successes: int  # successful episodes in the dataset
    episodes_attempted: int  # episodes the expert ran (failures included)
    successes_attempted: int  # ... and succeeded in
    rows: int  # chunk steps in the dataset
    expert: str  # the scripted expert's class
    seed: int  # experiment.seed: episode k of the run started from seed + k
    tasks: list[str]  # the distinct instructions, sorted
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    created_by: str = ""  # the command (or call) that wrote it
    action_noise: float = 0.0  # executed = expert action + N(0, (noise x half range)^2); actions hold the expert's
    format_version: int = FORMAT_VERSION

    @property
    def obs_keys(self) -> list[str]:
        """Observation keys stored, in ``OBS_KEYS`` order."""
        return [k for k in OBS_KEYS if (k == STATES and self.state_dim) or k in self.image_shapes]

    @property
    def expert_success_rate(self) -> float:
        return self.successes_attempted / max(self.episodes_attempted, 1)


def features(meta: Meta) -> Any:
    """The ``datasets.Features`` of a dataset described by ``meta``."""
    from datasets import Array2D, Array3D, Features, Sequence, Value

    cols: dict[str, Any] = {"episode_index": Value("int64"), "step": Value("int32"), "seed": Value("int64"),
                            "task": Value("string")}
    if meta.state_dim:
        cols[STATES] = Sequence(Value("float32"), length=meta.state_dim)
    for key, shape in meta.image_shapes.items():
        cols[key] = Array3D(shape=tuple(shape), dtype="uint8")
    c, a = meta.action_chunk, meta.action_dim
    cols |= {"actions": Array2D(shape=(c, a), dtype="float32"), "executed": Sequence(Value("bool"), length=c),
             "rewards": Sequence(Value("float32"), length=c), "done": Value("bool"), "success": Value("bool")}
    return Features(cols)


def columns(episodes: list[DemoEpisode], meta: Meta, first_episode: int = 0) -> dict[str, Any]:
    """The episodes as columns (numpy arrays, one row per chunk step), in ``features(meta)`` order; their
    ``episode_index`` counts from ``first_episode`` (the episodes written before them)."""
    lengths = [ep.length for ep in episodes]
    done = np.zeros(sum(lengths), dtype=bool)
    done[np.cumsum(lengths) - 1] = True
    cols: dict[str, Any] = {
        "episode_index": np.repeat(np.arange(first_episode, first_episode + len(episodes), dtype=np.int64), lengths),
        "step": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
        "seed": np.repeat(np.array([ep.seed for ep in episodes], dtype=np.int64), lengths),
        "task": [ep.task for ep in episodes for _ in range(ep.length)],
    }
    for key in meta.obs_keys:
        dtype = np.uint8 if key in IMAGE_KEYS else np.float32
        cols[key] = np.concatenate([ep.obs[key] for ep in episodes]).astype(dtype, copy=False)
    cols["actions"] = np.concatenate([ep.actions for ep in episodes]).astype(np.float32, copy=False)
    cols["executed"] = np.concatenate([ep.executed for ep in episodes]).astype(bool, copy=False)
    cols["rewards"] = np.concatenate([ep.rewards for ep in episodes]).astype(np.float32, copy=False)
    cols["done"] = done
    cols["success"] = np.repeat(np.array([ep.success for ep in episodes], dtype=bool), lengths)
    return cols


def arrow_array(values: Any, arrow_type: Any) -> Any:
    """``values`` (a numpy array [N, ...], or a list for strings) as an Arrow array of ``arrow_type``, built
    on their buffer rather than through Python objects: fixed-size lists (``Sequence(length=n)``) and the
    nested lists under ``datasets``' ``Array2D`` / ``Array3D`` get offsets computed from the shape.
    (``Dataset.from_dict`` turns an image column into Python objects first, over 10x its size in memory.)"""
    import pyarrow as pa

    if not isinstance(values, np.ndarray):
        return pa.array(values, type=arrow_type)
    if isinstance(arrow_type, pa.ExtensionType):  # Array2D / Array3D: list<list<...>> storage, dtype-exact
        return pa.ExtensionArray.from_storage(arrow_type, arrow_array(values, arrow_type.storage_type))
    if pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list(arrow_type):
        n, width = values.shape[0], values.shape[1]
        inner = arrow_array(values.reshape(n * width, *values.shape[2:]), arrow_type.value_type)
        if pa.types.is_fixed_size_list(arrow_type):
            return pa.FixedSizeListArray.from_arrays(inner, width)
        return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * width), inner)
    return pa.array(np.ascontiguousarray(values), type=arrow_type)


@dataclass
class Tally:
    """What a writer has been given so far: the counts ``Meta`` records about the episodes written."""

    episodes: int = 0
    successes: int = 0
    rows: int = 0
    tasks: dict[str, None] = field(default_factory=dict)  # distinct instructions, in order of first appearance
    seeds: list[int] = field(default_factory=list)  # per episode
    success: list[bool] = field(default_factory=list)  # per episode

    def add(self, ep: DemoEpisode) -> None:
        self.episodes += 1
        self.successes += bool(ep.success)
        self.rows += ep.length
        self.tasks.setdefault(ep.task)
        self.seeds.append(int(ep.seed))
        self.success.append(bool(ep.success))

    def meta(self, meta: Meta) -> Meta:
        """``meta`` with the episode, success, row and task counts of what was written."""
        return dataclasses.replace(meta, episodes=self.episodes, successes=self.successes, rows=self.rows,
                                   tasks=sorted(self.tasks))

    def check(self, meta: Meta, out: Path) -> None:
        """``ValueError`` if ``meta`` does not describe what was written (``meta.json`` would lie about the rows)."""
        wrong = [f"{name} {getattr(meta, name)} (written: {n})" for name, n in
                 (("episodes", self.episodes), ("successes", self.successes), ("rows", self.rows))
                 if getattr(meta, name) != n]
        if wrong:
            raise ValueError(f"meta.json of {str(out)!r} would say {', '.join(wrong)}")


def episode_bytes(ep: DemoEpisode) -> int:
    """Bytes of an episode's arrays (what its rows take in memory and, uncompressed, on disk)."""
    return sum(a.nbytes for a in (*ep.obs.values(), ep.actions, ep.executed, ep.rewards))


# Rows (their arrays' bytes) held in memory before they are written as one Arrow record batch. Writing holds
# them, their columns and the Arrow offsets of the image lists (Array3D stores an int32 offset per pixel
# row and per pixel: 1.33 bytes per image byte, which is also why the files are ~2.3x the images).
BATCH_MB = 32.0
SHARD_MB = 500.0  # an Arrow file full at this size, the next batch opens a new one (save_to_disk's max_shard_size)


class DatasetWriter:
    """Episodes written into a dataset folder as they come: every ~``batch_mb`` of rows an Arrow record batch,
    appended to the current Arrow file until it holds ``shard_mb``, then a new file (defaults ``BATCH_MB``,
    ``SHARD_MB``, read when the writer is made).

    Open it with ``dataset_writer`` (a temp folder renamed when complete). Memory holds one batch of
    episodes and its columns, however many episodes the dataset gets. The folder is the one
    ``Dataset.save_to_disk`` writes with that many shards (``data-0000i-of-0000n.arrow``, ``state.json``,
    ``dataset_info.json``), so ``datasets.load_from_disk`` and ``DemoDataset`` read it as before.
    """

    def __init__(self, folder: Path, meta: Meta, shard_mb: float | None = None, batch_mb: float | None = None) -> None:
        shard_mb = SHARD_MB if shard_mb is None else shard_mb
        batch_mb = BATCH_MB if batch_mb is None else batch_mb
        for name, value in (("shard_mb", shard_mb), ("batch_mb", batch_mb)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.folder, self.layout, self.features = folder, meta, features(meta)
        self.shard_bytes, self.batch_bytes = shard_mb * 2**20, batch_mb * 2**20
        self.tally = Tally()
        self.shards: list[str] = []  # Arrow files opened, in order
        self.arrow_bytes = 0  # Arrow bytes of the batches made so far (what they take on disk, uncompressed)
        self.finished = False
        self._pending: list[DemoEpisode] = []
        self._pending_bytes = 0
        self._written_episodes = 0
        self._file: Any = None  # the open Arrow file's datasets.ArrowWriter
        self._file_bytes = 0

    def add(self, ep: DemoEpisode) -> None:
        """Take one episode; a full batch goes to disk."""
        if self.finished:
            raise RuntimeError("DatasetWriter.add after finish")
        self._pending.append(ep)
        self._pending_bytes += episode_bytes(ep)
        self.tally.add(ep)
        if self._pending_bytes >= self.batch_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the pending episodes as a record batch of the current Arrow file (``data-<i>.arrow``, renamed
        by ``finish``), opening a new one when it is full."""
        import pyarrow as pa
        from datasets.arrow_writer import ArrowWriter

        if not self._pending:
            return
        cols = columns(self._pending, self.layout, self._written_episodes)
        schema = self.features.arrow_schema
        table = pa.Table.from_arrays([arrow_array(cols[f.name], f.type) for f in schema], schema=schema)
        self.arrow_bytes += table.nbytes
        if self._file is None:
            self.shards.append(f"data-{len(self.shards):05d}.arrow")
            self._file = ArrowWriter(features=self.features, path=str(self.folder / self.shards[-1]))
            self._file_bytes = 0
        self._file.write_table(table, writer_batch_size=table.num_rows)
        self._file_bytes += table.nbytes
        self._written_episodes += len(self._pending)
        self._pending, self._pending_bytes = [], 0
        if self._file_bytes >= self.shard_bytes:
            self._close_file()

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.finalize()
            finally:
                file.close()

    def abort(self) -> None:
        """Drop the open Arrow file after a failed write (its folder is about to be removed)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(Exception):  # a full disk fails the close too; the first error is the one
                file.close()

    def finish(self, meta: Meta) -> None:
        """Write what is pending, name the files as ``datasets`` does, then ``state.json``,
        ``dataset_info.json`` and ``meta.json`` (``meta`` must count what was written: ``Tally.meta``)."""
        from datasets.fingerprint import generate_random_fingerprint
        from datasets.info import DatasetInfo
        from datasets.utils.py_utils import asdict

        if not self.tally.episodes:
            raise ValueError(f"no episodes to write to {str(self.folder)!r}")
        if features(meta) != self.features:
            raise ValueError(f"meta.json of {str(self.folder)!r} describes other columns than were written")
        self.tally.check(meta, self.folder)
        self.flush()
        self._close_file()
        n = len(self.shards)
        files = []
        for i, name in enumerate(self.shards):
            files.append(f"data-{i:05d}-of-{n:05d}.arrow")
            (self.folder / name).rename(self.folder / files[-1])
        # What Dataset.save_to_disk writes beside its Arrow files (load_from_disk reads the files from it).
        state = {"_data_files": [{"filename": f} for f in files], "_fingerprint": generate_random_fingerprint(),
                 "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
                 "_split": None}
        (self.folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
        info = asdict(DatasetInfo(features=self.features))
        (self.folder / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2))
        fields = dataclasses.asdict(meta)
        fields = {"format_version": fields.pop("format_version"), **fields}  # first: what a reader checks first
        (self.folder / META_FILE).write_text(json.dumps(fields, indent=1) + "\n")
        self.finished = True


@contextmanager
def finished_or_aborted(writer: Any, what: str) -> Iterator[None]:
    """Around the block that fills a streaming writer (``finished`` flag, ``abort()``): leaving it without
    ``finish`` is an error, and any error drops the writer's open files before its temp folder goes."""
    try:
        yield
        if not writer.finished:
            raise RuntimeError(f"{what}: the writer was not finished; nothing was written")
    except BaseException:
        writer.abort()
        raise


@contextmanager
def dataset_writer(out: Path, meta: Meta, shard_mb: float | None = None, batch_mb: float | None = None,
                   expected_episodes: int | None = None) -> Iterator[DatasetWriter]:
    """A ``DatasetWriter`` into a temp folder beside ``out``, renamed onto ``out`` when the block ends after
    ``finish``; on any error (or Ctrl-C) the temp folder goes and nothing is left.

    ``meta`` gives the columns (``features(meta)``); its counts are ``finish``'s. A full disk raises
    ``DiskFullError`` naming ``out``, the space free and about how much the rows need (the Arrow bytes per
    episode of the batches made so far, times ``expected_episodes`` when the caller knows how many are
    coming, else times the episodes given).

        with dataset_writer(out, meta) as writer:
            for ep in episodes:
                writer.add(ep)
            writer.finish(writer.tally.meta(meta))
    """
    out = Path(out)
    writer: DatasetWriter | None = None
    try:
        with atomic_dir(out) as tmp:
            writer = DatasetWriter(tmp, meta, shard_mb, batch_mb)
            with finished_or_aborted(writer, f"dataset {str(out)!r}"):
                yield writer
    except OSError as exc:
        if disk_full(exc, out):  # the Arrow files hold the rows uncompressed: their size is what it needs
            raise disk_full_error("dataset", out, exc, _needed(writer, expected_episodes)) from exc
        raise


def _needed(writer: DatasetWriter | None, expected_episodes: int | None) -> int | None:
    """About the bytes the whole dataset takes on disk, from the batches made before the disk filled."""
    converted = writer._written_episodes + len(writer._pending) if writer is not None else 0
    if writer is None or not writer.arrow_bytes or not converted:
        return None
    return int(writer.arrow_bytes / converted * max(expected_episodes or 0, writer.tally.episodes))


def write_dataset(out: Path, episodes: Iterable[DemoEpisode], meta: Meta, shard_mb: float | None = None,
                  batch_mb: float | None = None) -> Path:
    """Write ``episodes`` and ``meta.json`` into the folder ``out`` atomically (nothing is left on failure),
    a batch of ~``batch_mb`` of rows at a time, a new Arrow file every ``shard_mb`` (``dataset_writer``: an
    iterator is never held whole).

    A full disk raises ``DiskFullError`` naming ``out``, the space free and about how much the rows need.
    """
    expected = len(episodes) if isinstance(episodes, Sized) else None
    if expected == 0:
        raise ValueError(f"no episodes to write to {str(out)!r}")
    with dataset_writer(Path(out), meta, shard_mb, batch_mb, expected) as writer:
        for ep in episodes:
            writer.add(ep)
        writer.finish(meta)
    return Path(out)


def read_meta(path: str | Path) -> Meta:
    """``meta.json`` of a dataset folder; a clear error if the folder is not one this version reads."""
    path = Path(path)
    if not (path / META_FILE).is_file():
        what = ("does not exist" if not path.exists() else
                f"has no {META_FILE}: it is not a demonstrations dataset (write one with `embodied collect`)")
        raise FileNotFoundError(f"dataset {str(path)!r} {what}")
    raw = json.loads((path / META_FILE).read_text())
    if raw.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"dataset {str(path)!r} has format version {raw.get('format_version')}, "
                         f"this embodied reads version {FORMAT_VERSION}")
    known = {f.name for f in dataclasses.fields(Meta)}
    required = [f.name for f in dataclasses.fields(Meta)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = sorted(name for name in required if name not in raw)
    if missing:
        raise ValueError(f"dataset {str(path)!r}: {META_FILE} lacks {', '.join(missing)}")
    return Meta(**{k: v for k, v in raw.items() if k in known})

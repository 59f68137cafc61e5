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
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied.atomic import atomic_dir, disk_full, disk_full_error
from embodied.types import MAIN_IMAGES, STATES, WRIST_IMAGES

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


def columns(episodes: list[DemoEpisode], meta: Meta) -> dict[str, Any]:
    """The episodes as columns (numpy arrays, one row per chunk step), in ``features(meta)`` order."""
    lengths = [ep.length for ep in episodes]
    done = np.zeros(sum(lengths), dtype=bool)
    done[np.cumsum(lengths) - 1] = True
    cols: dict[str, Any] = {
        "episode_index": np.repeat(np.arange(len(episodes), dtype=np.int64), lengths),
        "step": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
        "seed": np.repeat(np.array([ep.seed for ep in episodes], dtype=np.int64), lengths),
        "task": [ep.task for ep in episodes for _ in range(ep.length)],
    }
    for key in meta.obs_keys:
        dtype = np.uint8 if key in IMAGE_KEYS else np.float32
        cols[key] = np.concatenate([ep.obs[key] for ep in episodes]).astype(dtype)
    cols["actions"] = np.concatenate([ep.actions for ep in episodes]).astype(np.float32)
    cols["executed"] = np.concatenate([ep.executed for ep in episodes]).astype(bool)
    cols["rewards"] = np.concatenate([ep.rewards for ep in episodes]).astype(np.float32)
    cols["done"] = done
    cols["success"] = np.repeat(np.array([ep.success for ep in episodes], dtype=bool), lengths)
    return cols


def write_dataset(out: Path, episodes: list[DemoEpisode], meta: Meta) -> Path:
    """Write ``episodes`` and ``meta.json`` into the folder ``out`` atomically (nothing is left on failure).

    A full disk raises ``DiskFullError`` naming ``out``, the space free and about how much the rows need.
    """
    from datasets import Dataset, disable_progress_bars

    if not episodes:
        raise ValueError(f"no episodes to write to {str(out)!r}")
    disable_progress_bars()
    data = Dataset.from_dict(columns(episodes, meta), features=features(meta))
    try:
        with atomic_dir(Path(out)) as tmp:
            data.save_to_disk(str(tmp))
            fields = dataclasses.asdict(meta)
            fields = {"format_version": fields.pop("format_version"), **fields}  # first: what a reader checks first
            (tmp / META_FILE).write_text(json.dumps(fields, indent=1) + "\n")
    except OSError as exc:
        if disk_full(exc, Path(out)):  # the Arrow files hold the rows uncompressed: their size is what it needs
            raise disk_full_error("dataset", Path(out), exc, data.data.nbytes) from exc
        raise
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

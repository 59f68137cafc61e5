"""The on-disk format of demonstrations: a Hugging Face ``datasets`` folder plus ``meta.json``.

Why ``datasets``: Arrow files, memory-mapped, typed (images stay exact uint8 arrays), and readable
anywhere with one call, ``datasets.load_from_disk(DIR)``, without this project. (LeRobot's layout
stores frames as mp4 and needs its own reader; lossy video would also change what SFT sees.)

One row per chunk step of an episode:

| column | type | meaning |
|---|---|---|
| ``episode_index`` | int64 | episode number within the dataset (0, 1, ...) |
| ``step`` | int32 | chunk step within the episode |
| ``seed`` | int64 | the episode's reset seed (the env replays it exactly) |
| ``task`` | string | the instruction (``task_description``) |
| ``states`` | float32 [S] | state observation (obs modes with states) |
| ``main_images``, ``wrist_images`` | uint8 [H, W, 3] | camera images (rgb obs modes) |
| ``actions`` | float32 [C, A] | the sub-actions executed in this chunk (0 where not executed) |
| ``executed`` | bool [C] | which sub-steps ran (an episode can end inside a chunk) |
| ``rewards`` | float32 [C] | reward of each sub-step |
| ``done`` | bool | the episode ended in this chunk (its last row) |
| ``success`` | bool | the episode succeeded (repeated on its rows) |

``meta.json`` beside the Arrow files: format version, env id, obs mode, chunk length C, action
dimension A, state dimension, image shapes, episode and success counts, the expert, the command.
The folder is written under a temporary name and renamed when complete (``atomic_dir``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from embodied.atomic import atomic_dir
from embodied.types import MAIN_IMAGES, STATES, WRIST_IMAGES

FORMAT_VERSION = 1
META_FILE = "meta.json"
IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)


def features(meta: dict[str, Any]) -> Any:
    """The ``datasets.Features`` of a dataset described by ``meta``."""
    from datasets import Array2D, Array3D, Features, Sequence, Value

    cols: dict[str, Any] = {"episode_index": Value("int64"), "step": Value("int32"), "seed": Value("int64"),
                            "task": Value("string")}
    if meta["state_dim"]:
        cols[STATES] = Sequence(Value("float32"), length=meta["state_dim"])
    for key in IMAGE_KEYS:
        if meta["image_shapes"].get(key):
            cols[key] = Array3D(shape=tuple(meta["image_shapes"][key]), dtype="uint8")
    c, a = meta["action_chunk"], meta["action_dim"]
    cols |= {"actions": Array2D(shape=(c, a), dtype="float32"), "executed": Sequence(Value("bool"), length=c),
             "rewards": Sequence(Value("float32"), length=c), "done": Value("bool"), "success": Value("bool")}
    return Features(cols)


def rows(episodes: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Episode records (``EnvWorker.collect_round``) as columns, one row per chunk step."""
    cols: dict[str, list] = {name: [] for name in features(meta)}
    for index, ep in enumerate(episodes):
        length = len(ep["obs"])
        for t in range(length):
            obs = ep["obs"][t]
            cols["episode_index"].append(index), cols["step"].append(t), cols["seed"].append(int(ep["seed"]))
            cols["task"].append(ep["task"])
            for key in (STATES, *IMAGE_KEYS):
                if key in cols:
                    cols[key].append(np.asarray(obs[key]))
            cols["actions"].append(ep["actions"][t].astype(np.float32))
            cols["executed"].append(ep["executed"][t].astype(bool))
            cols["rewards"].append(ep["rewards"][t].astype(np.float32))
            cols["done"].append(t == length - 1)
            cols["success"].append(bool(ep["success"]))
    return cols


def write_dataset(out: Path, episodes: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write ``episodes`` and ``meta.json`` into ``out`` atomically (nothing is left on failure)."""
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    data = Dataset.from_dict(rows(episodes, meta), features=features(meta))
    with atomic_dir(Path(out)) as tmp:
        data.save_to_disk(str(tmp))
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return Path(out)


def read_meta(path: str | Path) -> dict[str, Any]:
    """``meta.json`` of a dataset folder, with a clear error if the folder is not one."""
    path = Path(path)
    if not (path / META_FILE).is_file():
        what = "does not exist" if not path.exists() else f"has no {META_FILE} (not written by `embodied collect`)"
        raise FileNotFoundError(f"dataset {str(path)!r} {what}")
    meta = json.loads((path / META_FILE).read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"dataset {str(path)!r} has format version {meta.get('format_version')}, "
                         f"this embodied reads {FORMAT_VERSION}")
    return meta

"""A torch ``Dataset`` over a demonstrations folder, and a ``collate`` into what a policy takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.data.format import IMAGE_KEYS, read_meta
from embodied.types import STATES, TASK_DESCRIPTIONS, Obs

OBS_KEYS = (STATES, *IMAGE_KEYS)


class DemoDataset(torch.utils.data.Dataset):
    """The chunk steps of a dataset written by ``embodied collect``, held in memory as numpy arrays.

    ``data[i]`` is a dict: the obs keys present (``states`` float32 [S], images uint8 [H, W, 3]),
    ``task_descriptions`` (str), ``actions`` float32 [C, A], ``executed`` bool [C]. ``meta`` is
    the dataset's ``meta.json``; ``episode_indices`` [N] says which episode each row is from.
    """

    def __init__(self, path: str | Path) -> None:
        from datasets import disable_progress_bars, load_from_disk

        disable_progress_bars()

        self.path = Path(path)
        self.meta = read_meta(self.path)
        table = load_from_disk(str(self.path)).with_format("numpy")
        if len(table) == 0:
            raise ValueError(f"dataset {str(self.path)!r} holds no episodes (collect more, or with --all)")
        columns = [c for c in (*OBS_KEYS, "actions", "executed", "episode_index") if c in table.column_names]
        data = table[:]
        dtypes = {STATES: np.float32, "actions": np.float32, "executed": bool, "episode_index": np.int64,
                  **{k: np.uint8 for k in IMAGE_KEYS}}  # numpy formatting widens Array3D uint8; cast back (exact)
        self.columns = {c: np.asarray(data[c]).astype(dtypes[c], copy=False) for c in columns}
        self.tasks = [str(t) for t in data["task"]]
        self.obs_keys = [k for k in OBS_KEYS if k in self.columns]

    @property
    def episode_indices(self) -> np.ndarray:
        return self.columns["episode_index"]

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = {k: self.columns[k][i] for k in (*self.obs_keys, "actions", "executed")}
        item[TASK_DESCRIPTIONS] = self.tasks[i]
        return item


def collate(items: list[dict[str, Any]]) -> tuple[Obs, torch.Tensor, torch.Tensor]:
    """``(obs, actions [B, C, A], executed [B, C])``; ``obs`` is batched as ``Policy.act`` takes it."""
    obs: Obs = {k: np.stack([it[k] for it in items]) for k in OBS_KEYS if k in items[0]}
    obs[TASK_DESCRIPTIONS] = [it[TASK_DESCRIPTIONS] for it in items]
    actions = torch.from_numpy(np.stack([it["actions"] for it in items]).astype(np.float32))
    executed = torch.from_numpy(np.stack([it["executed"] for it in items]).astype(bool))
    return obs, actions, executed


def check_compatible(meta: dict[str, Any], action_chunk: int, action_dim: int | None,
                     needs: set[str] | None) -> None:
    """Refuse a dataset whose chunk length, action dimension or observations do not fit the policy."""
    problems = []
    if meta["action_chunk"] != action_chunk:
        problems.append(f"its chunks have {meta['action_chunk']} sub-actions, policy.action_chunk is {action_chunk}")
    if action_dim is not None and meta["action_dim"] != action_dim:
        problems.append(f"its actions have {meta['action_dim']} dimensions, the env's {action_dim}")
    has = ({"states"} if meta["state_dim"] else set()) | ({"images"} if meta["image_shapes"].get("main_images") else set())
    if needs and not needs <= has:
        problems.append(f"it holds {' and '.join(sorted(has)) or 'no observations'} (obs mode {meta['obs_mode']!r}), "
                        f"the policy needs {' and '.join(sorted(needs))}")
    if problems:
        raise ValueError(f"dataset does not fit: {'; '.join(problems)}")

"""A torch ``Dataset`` over a demonstrations folder, and a ``collate`` into what a policy takes.

    data = DemoDataset("data/pick_place")            # rows = chunk steps; data.meta = meta.json
    check_compatible(data.meta, cfg.policy.action_chunk, spec.action_dim, cfg.policy.required_observations())
    loader = DataLoader(data, batch_size=64, shuffle=True, collate_fn=collate)
    for obs, actions, executed in loader:            # obs exactly as Policy.act takes it
        logprobs, _, _ = policy.evaluate(policy.forward_inputs(obs), actions)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from embodied.core.types import MAIN_IMAGES, TASK_DESCRIPTIONS, Obs
from embodied.data.format import IMAGE_KEYS, OBS_KEYS, Meta, read_meta

if TYPE_CHECKING:
    from embodied.policy.base import PolicySpec


class DemoSample(NamedTuple):
    """One chunk step: what the policy saw and the chunk the expert executed."""

    obs: Obs  # unbatched: states float32 [S], main_images / wrist_images uint8 [H, W, 3], task_descriptions str
    actions: torch.Tensor  # float32 [C, A], 0 where not executed
    executed: torch.Tensor  # bool [C]


class DemoBatch(NamedTuple):
    """B chunk steps; ``obs`` is batched exactly as ``Policy.act`` and ``Policy.forward_inputs`` take it."""

    obs: Obs  # states float32 [B, S], images uint8 [B, H, W, 3] (numpy), task_descriptions list of B str
    actions: torch.Tensor  # float32 [B, C, A]
    executed: torch.Tensor  # bool [B, C]


class DemoDataset(torch.utils.data.Dataset):
    """The chunk steps of a dataset written by ``embodied collect``.

    The columns are read once from the (memory-mapped) Arrow files into numpy arrays of their own
    dtypes (images stay uint8), so indexing is cheap. ``meta`` is ``meta.json`` (``Meta``);
    ``episode_indices`` [N] says which episode each row belongs to (split by episode, not by row).
    ``fps`` is None: the rows are chunk steps of the env that collected them.
    """

    fps: float | None = None
    chunk_rows = True

    def __init__(self, path: str | Path) -> None:
        from datasets import disable_progress_bars, load_from_disk

        disable_progress_bars()
        self.path = Path(path)
        self.meta: Meta = read_meta(self.path)
        empty = ValueError(f"dataset {str(self.path)!r} holds no episodes (collect some, or keep failures with --all)")
        if self.meta.episodes == 0 or self.meta.rows == 0:
            raise empty  # (datasets itself cannot reload a saved dataset of no rows)
        try:
            rows = load_from_disk(str(self.path))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"dataset {str(self.path)!r} has a meta.json but no readable rows: {exc}") from None
        if len(rows) == 0:
            raise empty
        table = rows.with_format("arrow")[:]
        self.obs_keys: list[str] = [k for k in OBS_KEYS if k in table.column_names]
        self.columns: dict[str, np.ndarray] = {
            k: _numpy(table, k) for k in (*self.obs_keys, "actions", "executed", "episode_index", "step")}
        self.tasks: list[str] = table.column("task").to_pylist()
        # RLPD's demo replay (embodied.replay.demos) reads what the env rewarded and whether the episode succeeded
        self.outcomes: dict[str, np.ndarray] = {k: _numpy(table, k) for k in ("rewards", "success")
                                                if k in table.column_names}

    @property
    def episode_indices(self) -> np.ndarray:
        """int64 [N]: the episode of every row."""
        return self.columns["episode_index"]

    @property
    def steps(self) -> np.ndarray:
        """int32 [N]: each row's chunk step within its episode (0 = the episode's first)."""
        return self.columns["step"]

    @property
    def rewards(self) -> np.ndarray | None:
        """float32 [N, C]: each row's sub-step rewards as the env gave them (0 where not executed)."""
        return self.outcomes.get("rewards")

    @property
    def episode_success(self) -> np.ndarray | None:
        """bool [N]: whether each row's episode succeeded."""
        return self.outcomes.get("success")

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i: int) -> DemoSample:
        obs: Obs = {k: self.columns[k][i] for k in self.obs_keys}
        obs[TASK_DESCRIPTIONS] = self.tasks[i]
        return DemoSample(obs, torch.from_numpy(self.columns["actions"][i]),
                          torch.from_numpy(self.columns["executed"][i]))

    def check(self, action_chunk: int, needed: Iterable[str]) -> None:
        """``check_compatible`` without the env: the chunk length and the observations the policy needs."""
        check_compatible(self.meta, action_chunk, None, set(needed))

    def fit(self, spec: PolicySpec, action_chunk: int, needed: Iterable[str]) -> None:
        """``check_compatible`` against the env: also the action dimension and the image size."""
        check_compatible(self.meta, action_chunk, spec.action_dim, set(needed), spec.image_shape)


def collate(samples: list[DemoSample]) -> DemoBatch:
    """Stack samples into ``(obs, actions [B, C, A], executed [B, C])`` (``collate_fn`` of a ``DataLoader``)."""
    first = samples[0].obs
    obs: Obs = {k: np.stack([s.obs[k] for s in samples]) for k in first if k != TASK_DESCRIPTIONS}
    obs[TASK_DESCRIPTIONS] = [s.obs[TASK_DESCRIPTIONS] for s in samples]
    return DemoBatch(obs, torch.stack([s.actions for s in samples]), torch.stack([s.executed for s in samples]))


def check_compatible(meta: Meta, action_chunk: int, action_dim: int | None, obs_keys: set[str] | None,
                     image_shape: tuple[int, ...] | None = None) -> None:
    """Refuse a dataset that does not fit the policy, naming every mismatch (``ValueError``).

    ``obs_keys``: the observations the policy needs, as obs keys (``states``, ``main_images``,
    ``wrist_images``) or as ``PolicyConfig.required_observations()`` names them (``images`` =
    ``main_images``). ``action_dim`` and ``image_shape`` (H, W, 3) are checked when given.
    """
    problems = []
    if meta.action_chunk != action_chunk:
        problems.append(f"its chunks have {meta.action_chunk} sub-actions, policy.action_chunk is {action_chunk}")
    if action_dim is not None and meta.action_dim != action_dim:
        problems.append(f"its actions have {meta.action_dim} dimensions, the policy's (the env's) {action_dim}")
    needed = {MAIN_IMAGES if k == "images" else k for k in (obs_keys or ())}
    missing = sorted(needed - set(meta.obs_keys))
    if missing:
        problems.append(f"it holds {', '.join(meta.obs_keys) or 'no observations'} (obs mode {meta.obs_mode!r}), "
                        f"the policy needs {', '.join(sorted(needed))} (missing: {', '.join(missing)})")
    shape = meta.image_shapes.get(MAIN_IMAGES)
    if image_shape is not None and shape is not None and tuple(shape) != tuple(image_shape):
        problems.append(f"its main_images are {tuple(shape)}, the env's {tuple(image_shape)}")
    if problems:
        raise ValueError(f"dataset ({meta.env_id}, {meta.episodes} episodes) does not fit the policy: "
                         + "; ".join(problems))


def _numpy(table: Any, name: str) -> np.ndarray:
    """A fixed-shape column as one numpy array [N, ...] of its stored dtype (uint8 images stay uint8)."""
    import pyarrow as pa

    parts = []
    for chunk in table.column(name).chunks:
        if isinstance(chunk, pa.ExtensionArray):  # Array2D / Array3D: datasets' own, dtype-exact conversion
            parts.append(chunk.to_numpy(zero_copy_only=False))
            continue
        values, shape = chunk, []
        while pa.types.is_fixed_size_list(values.type):  # Sequence(length=n): flatten to the values
            shape.append(values.type.list_size)
            values = values.flatten()
        parts.append(values.to_numpy(zero_copy_only=False).reshape(len(chunk), *shape))
    out = np.concatenate(parts) if len(parts) != 1 else parts[0]
    out = out.astype(np.uint8, copy=False) if name in IMAGE_KEYS else out
    return out if out.flags.writeable else out.copy()  # torch.from_numpy wants writable memory

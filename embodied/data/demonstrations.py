"""One interface over demonstrations on disk, whatever the format: what ``embodied sft`` trains on.

    data = open_demonstrations("data/pick_place", ReadOptions(action_chunk=4))   # format detected
    data.check(4, {"states"})                    # before any worker: what the policy needs is there
    data.fit(spec, 4, {"states"})                # once the env is known: its keys, sizes, dimensions
    obs, actions, executed = collate([data[0], data[1]])

A list of folders reads as one (``DemoUnion``): their episodes side by side, for a run that learns from
several collections (the tasks of a suite collected apart, more demonstrations of the hard ones).

Two formats, told apart by their metadata file:

- ``meta.json``: embodied's Arrow format (``embodied.data.format``), one row per chunk step,
  chunks of the C the collection ran at;
- ``meta/info.json``: a LeRobot folder (``embodied.data.lerobot``), one row per frame, chunks of
  any C built at load time within each episode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from embodied.data.dataset import DemoSample
from embodied.data.format import META_FILE

if TYPE_CHECKING:
    from embodied.policy.base import PolicySpec

Format = Literal["arrow", "lerobot"]
LEROBOT_INFO = "meta/info.json"


class Demonstrations(Protocol):
    """What SFT reads: samples, their episodes, and the checks against the policy and the env."""

    path: Path
    fps: float | None  # frames per second the demonstrations were recorded at (None: not recorded)
    chunk_rows: bool  # True: an episode's consecutive rows are consecutive chunks (embodied's format); False: rows
    # are frames, and the chunk after a row's starts as many rows later as that chunk executed sub-steps (LeRobot)

    @property
    def rewards(self) -> np.ndarray | None:
        """float32 [N, C]: the reward of each sub-step of every row's chunk, 0 where not executed (None: not
        recorded; RLPD then gives a sparse success reward, ``embodied.replay.demos``)."""

    @property
    def episode_success(self) -> np.ndarray | None:
        """bool [N]: whether each row's episode succeeded (None: not recorded)."""

    @property
    def episode_indices(self) -> np.ndarray:
        """int [N]: the episode of every sample (splits are by episode)."""

    @property
    def steps(self) -> np.ndarray:
        """int [N]: each sample's position in its episode (0 = its first)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> DemoSample: ...

    def check(self, action_chunk: int, needed: Iterable[str]) -> None:
        """Raise ``ValueError`` naming what is wrong if the policy's chunk or needed observations
        (``PolicyConfig.required_observations()``) cannot be served; cheap, before any worker starts."""

    def fit(self, spec: PolicySpec, action_chunk: int, needed: Iterable[str]) -> None:
        """Serve what the env gives (``spec``); raise ``ValueError`` naming both sides of any mismatch."""


@dataclass(frozen=True)
class ReadOptions:
    """How to read a dataset; only per-frame formats (LeRobot) use them."""

    action_chunk: int = 1  # C of the chunks built from per-frame rows
    features: Mapping[str, str | None] = field(default_factory=dict)  # sft.features: our key -> feature name
    frame_cache_mb: float = 1024.0  # decoded camera frames kept in memory


def detect_format(path: str | Path) -> Format:
    """``arrow`` (a ``meta.json``) or ``lerobot`` (a ``meta/info.json``); ``FileNotFoundError`` otherwise."""
    path = Path(path)
    if (path / META_FILE).is_file():
        return "arrow"
    if (path / LEROBOT_INFO).is_file():
        return "lerobot"
    if not path.exists():
        raise FileNotFoundError(f"dataset {str(path)!r} does not exist")
    raise FileNotFoundError(f"dataset {str(path)!r} has neither {META_FILE} (embodied's format, written by "
                            f"`embodied collect`) nor {LEROBOT_INFO} (a LeRobot dataset): it is not a dataset")


def open_demonstrations(path: str | Path | Sequence[str | Path],
                        options: ReadOptions = ReadOptions()) -> Demonstrations:
    """The demonstrations in ``path``, in whichever format they are (``detect_format``); a list of folders
    reads as one (``DemoUnion``)."""
    if not isinstance(path, (str, Path)):
        return DemoUnion([open_demonstrations(each, options) for each in path])
    if detect_format(path) == "arrow":
        from embodied.data.dataset import DemoDataset

        return DemoDataset(path)
    from embodied.data.lerobot import LeRobotDemos

    return LeRobotDemos(path, options.action_chunk, options.features, options.frame_cache_mb)


class DemoUnion:
    """Several demonstration folders read as one: rows in the order of the list, episodes renumbered so that
    no two folders share one (SFT's split stays by whole episode).

    The folders must agree on what a row is (chunk steps or frames) and on their frame rate; ``check`` and
    ``fit`` hold for every folder, and an error names the folder it came from. Rewards and episode outcomes
    are given only where every folder recorded them.
    """

    def __init__(self, parts: Sequence[Demonstrations]) -> None:
        if not parts:
            raise ValueError("an empty list of datasets: name at least one folder")
        kinds = {p.chunk_rows for p in parts}
        if len(kinds) > 1:
            raise ValueError("these datasets cannot be read as one: " + ", ".join(
                f"{p.path} ({'chunk steps' if p.chunk_rows else 'frames'})" for p in parts))
        rates = {p.fps for p in parts}
        if len(rates) > 1:
            raise ValueError("these datasets were recorded at different rates: " + ", ".join(
                f"{p.path} ({'the env' if p.fps is None else f'{p.fps:g} fps'})" for p in parts))
        self.parts = list(parts)
        self.path = Path(", ".join(str(p.path) for p in parts))  # for messages: every folder
        self.fps = parts[0].fps
        self.chunk_rows = parts[0].chunk_rows
        self.ends = np.cumsum([len(p) for p in parts])
        episodes, first = [], 0
        for part in parts:
            own = np.asarray(part.episode_indices, dtype=np.int64)
            episodes.append(own - (own.min() if len(own) else 0) + first)
            first = int(episodes[-1].max()) + 1 if len(own) else first
        self._episodes = np.concatenate(episodes)
        self._steps = np.concatenate([np.asarray(p.steps) for p in parts])

    def _joined(self, name: str) -> np.ndarray | None:
        columns = [getattr(p, name) for p in self.parts]
        return None if any(c is None for c in columns) else np.concatenate(columns)

    @property
    def rewards(self) -> np.ndarray | None:
        """float32 [N, C], where every folder recorded them (None otherwise)."""
        return self._joined("rewards")

    @property
    def episode_success(self) -> np.ndarray | None:
        """bool [N], where every folder recorded them (None otherwise)."""
        return self._joined("episode_success")

    @property
    def episode_indices(self) -> np.ndarray:
        """int64 [N]: episodes numbered across the folders."""
        return self._episodes

    @property
    def steps(self) -> np.ndarray:
        """int [N]: each row's position in its episode."""
        return self._steps

    def __len__(self) -> int:
        return int(self.ends[-1])

    def __getitem__(self, i: int) -> DemoSample:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        part = int(np.searchsorted(self.ends, i, side="right"))
        return self.parts[part][i - (int(self.ends[part - 1]) if part else 0)]

    def check(self, action_chunk: int, needed: Iterable[str]) -> None:
        """Every folder's ``check``; the error names the folder."""
        for part in self.parts:
            _named(part, lambda: part.check(action_chunk, needed))

    def fit(self, spec: PolicySpec, action_chunk: int, needed: Iterable[str]) -> None:
        """Every folder's ``fit``; the error names the folder."""
        for part in self.parts:
            _named(part, lambda: part.fit(spec, action_chunk, needed))


def _named(part: Demonstrations, check: Callable[[], None]) -> None:
    try:
        check()
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if str(part.path) in message else f"{part.path}: {message}") from None

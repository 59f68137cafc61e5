"""A bounded ring buffer of chunk transitions for off-policy training (SAC), held by the actor.

Filled from the ``Trajectory`` objects the rollout workers send over the ``trajectories`` channel (recorded
with their observations: ``Trajectory.observations`` / ``next_observations``). One row is one chunk step of
one env: the obs as the env gave it (uint8 images stay uint8), the chunk ``[C, A]``, its discounted reward
and bootstrap discount (``embodied.algorithms.transitions.chunk_reward``), whether it bootstraps (not terminated)
and the next obs (``final_obs`` where the episode ended). With ``n_step`` > 1 the reward, discount, bootstrap
and next obs are those of the n-step return from that chunk on (``n_step_returns``): up to n chunk steps of the
same env within the trajectory, stopping where its episode ends. All on the CPU; when full the oldest rows go first.

On disk (``save`` / ``load``; a checkpoint's ``replay/`` folder) the filled rows are cut into chunks of a fixed
number of rows (about ``CHUNK_BYTES`` each): ``chunk_000000.bin``, ... hold each field's rows as raw bytes, one
field after another in the order ``replay.json`` lists them, and ``replay.json`` holds the ring's counters, the
fields' dtypes and shapes, and every chunk's rows and sha256. A chunk whose bytes equal the same chunk of an
earlier save (``previous``: the ring is overwritten a stretch at a time, so most chunks of a full buffer did not
change between two checkpoints) is hard-linked from there after its file is checked against that digest, not
written again. The files are written once and never modified, so the checkpoints that share one stay whole when
either is deleted.

    replay = ReplayBuffer(capacity=100_000)
    received = replay.add(trajectory, gamma=0.99)           # chunk transitions added
    batch = replay.sample(256, torch.Generator().manual_seed(0))
    replay.save(folder, previous=last_folder)               # into a checkpoint's temp folder (atomic_dir)
    replay.load(folder)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from embodied.algorithms.transitions import ReplaySample, chunk_reward, n_step_returns
from embodied.core.types import Trajectory

_FIELDS = ("actions", "reward", "discount", "bootstrap")
MANIFEST = "replay.json"
FORMAT = 1
CHUNK_BYTES = 64 * 2**20  # about this much of the ring per chunk file


class ReplayBuffer:
    """``capacity`` chunk transitions in preallocated CPU tensors, allocated at the first ``add``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.size = 0  # rows filled
        self.position = 0  # the next row written
        self.added = 0  # rows ever added (the oldest are overwritten once it passes capacity)
        self.storage: dict[str, torch.Tensor] = {}  # "obs/<key>", "next_obs/<key>" and _FIELDS, each [capacity, ...]

    def __len__(self) -> int:
        return self.size

    def add(self, trajectory: Trajectory, gamma: float, n_step: int = 1, actions: torch.Tensor | None = None,
            bootstrap_terminations: bool = False) -> int:
        """Every chunk step of ``trajectory`` that executed a sub-step, as ``n_step`` returns; returns how many.

        ``actions`` [T, N, ...] are what the critics score, when not the executed chunks (``Policy.replay_actions``:
        DSRL's initial noise). ``bootstrap_terminations``: a terminated row bootstraps from its final obs too."""
        if trajectory.observations is None or trajectory.next_observations is None:
            raise ValueError("replay needs trajectories recorded with observations (rollout workers with "
                             "record_observations, which an off-policy algorithm turns on)")
        reward, discount = chunk_reward(trajectory.rewards, trajectory.executed, gamma)  # [T, N]
        reward, discount, bootstrap, last = n_step_returns(  # rows flat [T * N], t-major
            reward.reshape(-1), discount.reshape(-1), trajectory.terminated.reshape(-1),
            following_rows(trajectory.dones), n_step, bootstrap_terminations)
        chosen = trajectory.actions if actions is None else actions
        flat = {"actions": chosen.reshape(-1, *chosen.shape[2:]), "reward": reward,
                "discount": discount, "bootstrap": bootstrap}
        flat |= {f"obs/{k}": v.reshape(-1, *v.shape[2:]) for k, v in trajectory.observations.items()}
        flat |= {f"next_obs/{k}": v.reshape(-1, *v.shape[2:])[last] for k, v in trajectory.next_observations.items()}
        keep = trajectory.executed.any(-1).reshape(-1)  # an env done earlier (no auto-reset) executed nothing
        flat = {k: v[keep] for k, v in flat.items()}
        count = int(keep.sum())
        if count:
            self._write(flat, count)
        return count

    def add_transitions(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, reward: torch.Tensor,
                        discount: torch.Tensor, bootstrap: torch.Tensor, next_obs: dict[str, torch.Tensor]) -> int:
        """Chunk transitions already flat ([M, ...] each, as ``ReplaySample`` names them): RLPD's demonstrations."""
        rows = {"actions": actions, "reward": reward, "discount": discount, "bootstrap": bootstrap}
        rows |= {f"obs/{k}": v for k, v in obs.items()} | {f"next_obs/{k}": v for k, v in next_obs.items()}
        if len(actions):
            self._write(rows, len(actions))
        return len(actions)

    def _write(self, rows: dict[str, torch.Tensor], count: int) -> None:
        if not self.storage:
            self.storage = {k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in rows.items()}
        if rows.keys() != self.storage.keys():
            raise ValueError(f"transitions with keys {sorted(rows)} do not fit a replay of {sorted(self.storage)}")
        if count > self.capacity:  # only the newest fit
            rows, count = {k: v[-self.capacity:] for k, v in rows.items()}, self.capacity
        index = (self.position + torch.arange(count)) % self.capacity
        for key, value in rows.items():
            self.storage[key][index] = value.to(self.storage[key].dtype)
        self.position = (self.position + count) % self.capacity
        self.size = min(self.size + count, self.capacity)
        self.added += count

    def sample(self, batch_size: int, generator: torch.Generator) -> ReplaySample:
        """``batch_size`` rows drawn uniformly with replacement; the same ``generator`` state draws the same rows."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = torch.randint(self.size, (batch_size,), generator=generator)
        rows = {k: v[index] for k, v in self.storage.items()}
        return ReplaySample(
            obs={k[4:]: v for k, v in rows.items() if k.startswith("obs/")},
            actions=rows["actions"].float(), reward=rows["reward"].float(), discount=rows["discount"].float(),
            bootstrap=rows["bootstrap"].bool(),
            next_obs={k[9:]: v for k, v in rows.items() if k.startswith("next_obs/")})

    def state_dict(self, copy: bool = True) -> dict[str, Any]:
        """The filled rows and the ring's position (checkpoints: a resumed run samples the same batches);
        ``copy=False`` gives views of the live storage (to write them out before the next ``add``)."""
        return {"capacity": self.capacity, "size": self.size, "position": self.position, "added": self.added,
                "storage": {k: v[: self.size].clone() if copy else v[: self.size] for k, v in self.storage.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"the saved replay holds {state['capacity']} rows, this one {self.capacity} "
                             f"(algorithm.replay_capacity differs)")
        self.size, self.position, self.added = int(state["size"]), int(state["position"]), int(state["added"])
        self.storage = {}
        for key, rows in state["storage"].items():
            self.storage[key] = torch.zeros((self.capacity, *rows.shape[1:]), dtype=rows.dtype)
            self.storage[key][: self.size] = rows

    # -- on disk ------------------------------------------------------------------------------------

    def save(self, folder: Path, previous: Path | None = None, chunk_bytes: int = CHUNK_BYTES) -> dict[str, int]:
        """Write the filled rows as chunk files and ``replay.json`` into ``folder`` (a fresh one, e.g. inside a
        checkpoint's temp folder); chunks equal to ``previous``'s (an earlier save's folder) are hard-linked from
        it. Returns how many chunks were ``written`` and ``linked``."""
        return save_replay(self.state_dict(copy=False), folder, previous, chunk_bytes)

    def load(self, folder: Path) -> None:
        """Put back what ``save`` wrote into ``folder``; a missing, short or altered chunk raises ``ValueError``
        naming its file."""
        manifest = read_replay_manifest(folder)
        if int(manifest["capacity"]) != self.capacity:
            raise ValueError(f"{folder}: the saved replay holds {manifest['capacity']} rows, this one {self.capacity} "
                             f"(algorithm.replay_capacity differs)")
        size = int(manifest["size"])
        storage = {k: torch.zeros((self.capacity, *f["shape"]), dtype=getattr(torch, f["dtype"]))
                   for k, f in manifest["fields"].items()}
        for entry in manifest["chunks"]:
            path, start, rows = folder / entry["file"], int(entry["start"]), int(entry["rows"])
            digest = hashlib.sha256()
            with path.open("rb") as f:
                for key in manifest["fields"]:
                    view = _bytes_of(storage[key][start: start + rows])
                    if f.readinto(view) != len(view):
                        raise ValueError(f"{path}: shorter than its {rows} rows (truncated)")
                    digest.update(view)
                if f.read(1):
                    raise ValueError(f"{path}: longer than its {rows} rows")
            if digest.hexdigest() != entry["sha256"]:
                raise ValueError(f"{path}: checksum mismatch (modified after it was written)")
        if sum(int(e["rows"]) for e in manifest["chunks"]) != size:
            raise ValueError(f"{folder / MANIFEST}: its chunks do not hold its {size} rows")
        self.storage, self.size = storage, size
        self.position, self.added = int(manifest["position"]), int(manifest["added"])


def save_replay(state: dict[str, Any], folder: Path, previous: Path | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> dict[str, int]:
    """``ReplayBuffer.save`` of a replay's ``state_dict`` (the buffer's own, or one another actor rank sent to
    the rank writing the checkpoint): its rows as chunk files and ``replay.json`` in ``folder``, chunks equal to
    ``previous``'s hard-linked from it. Returns how many chunks were ``written`` and ``linked``."""
    storage, size = state["storage"], int(state["size"])
    folder.mkdir(parents=True, exist_ok=True)
    keys = sorted(storage)
    row_bytes = sum(storage[k][0].numel() * storage[k].element_size() for k in keys) if keys else 1
    rows_per_chunk = max(1, chunk_bytes // max(row_bytes, 1))
    layout = {k: {"dtype": str(storage[k].dtype).removeprefix("torch."),
                  "shape": list(storage[k].shape[1:])} for k in keys}
    before = _reusable_chunks(previous, layout, rows_per_chunk)
    chunks, counts = [], {"written": 0, "linked": 0}
    for index in range(math.ceil(size / rows_per_chunk)):
        start = index * rows_per_chunk
        rows = min(rows_per_chunk, size - start)
        parts = [_bytes_of(storage[k][start: start + rows]) for k in keys]
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        entry = {"file": f"chunk_{index:06d}.bin", "start": start, "rows": rows, "sha256": digest.hexdigest()}
        source = before.get((start, rows, entry["sha256"]))
        if source is not None and _link(source, folder / entry["file"], entry["sha256"]):
            counts["linked"] += 1
        else:
            _write_chunk(folder / entry["file"], parts)
            counts["written"] += 1
        chunks.append(entry)
    manifest = {"format": FORMAT, "capacity": state["capacity"], "size": size, "position": state["position"],
                "added": state["added"], "rows_per_chunk": rows_per_chunk, "fields": layout, "chunks": chunks}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return counts


def following_rows(dones: torch.Tensor) -> torch.Tensor:
    """int64 [T * N]: for the rows of a [T, N] trajectory flattened t-major, the row of the same env's next chunk
    step, or -1 where its episode ended in the chunk (``dones``) or the trajectory ends (n-step windows stop)."""
    T, N = dones.shape
    rows = torch.arange(T * N).reshape(T, N)
    following = torch.full((T, N), -1, dtype=torch.int64)
    following[:-1] = torch.where(dones[:-1], -1, rows[1:])
    return following.reshape(-1)


def read_replay_manifest(folder: Path) -> dict[str, Any]:
    """The ``replay.json`` of a saved replay folder (``ValueError`` naming it when missing or unreadable)."""
    file = Path(folder) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a readable replay manifest ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{file}: replay format {manifest.get('format')!r}, this embodied reads {FORMAT}")
    return manifest


def _bytes_of(rows: torch.Tensor) -> memoryview:
    """The raw bytes of a contiguous run of rows, as a writable view of the tensor's own memory (no copy)."""
    return memoryview(rows.reshape(-1).view(torch.uint8).numpy()).cast("B")


def _write_chunk(path: Path, parts: list[memoryview]) -> None:
    with path.open("wb") as f:
        for part in parts:
            f.write(part)


def _reusable_chunks(previous: Path | None, layout: dict[str, Any], rows_per_chunk: int) -> dict[tuple, Path]:
    """The chunk files of an earlier save laid out as this one, by (start, rows, sha256); none when it is
    missing, unreadable or laid out otherwise (another chunk size or other fields)."""
    if previous is None:
        return {}
    try:
        manifest = read_replay_manifest(previous)
    except ValueError:
        return {}
    if manifest.get("fields") != layout or manifest.get("rows_per_chunk") != rows_per_chunk:
        return {}
    return {(int(e["start"]), int(e["rows"]), e["sha256"]): Path(previous) / e["file"] for e in manifest["chunks"]}


def _link(source: Path, target: Path, sha256: str) -> bool:
    """Hard-link ``source`` as ``target`` if its bytes still have ``sha256`` (so a chunk damaged on disk is never
    carried into a new checkpoint); False where it does not, or where the filesystem cannot link."""
    try:
        digest = hashlib.sha256()
        with source.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != sha256:
            return False
        os.link(source, target)
    except OSError:
        return False
    return True

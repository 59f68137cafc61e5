"""Env mixtures: several env ids in one training batch (``env.id`` a list of ids or a named set).

    env: {id: [LIBERO-Object-v0, LIBERO-Object-TempX0.1-v0], num_envs: 8, weights: [3, 1]}

The batch is split into one contiguous block of envs per member (``EnvConfig.member_counts``: shares by
``env.weights``, at least one env each), in the members' order, so which member an env runs is a pure function of
its index in the batch: an env worker builds the members its slice overlaps (``member_slices``), and a replaced
env worker, which gets the same slice, the same members. Inside a member, envs are indexed from 0
(``env_index``), so a suite that spreads its tasks over the batch spreads them over the member's envs.

Members must share observation and action spaces (one policy acts on the whole batch): checked before any worker
starts from the classes (``observation_shapes``) where they can tell, else when the envs are built
(``check_same_spaces``); either way the error names the two members and the key that differs. Every episode carries
its member's id (``EpisodeStats.env_id``), which the run logs as ``env/<id>/*`` beside the pooled ``env/*``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from embodied.config import EnvConfig
from embodied.core.types import ChunkStepResult, Obs, obs_concat


@dataclass(frozen=True)
class MemberSlice:
    """The envs of one member inside an env worker's slice of the batch."""

    env_id: str
    first_index: int  # the slice's first env counted within the member (what its envs get as ``env_index``)
    num_envs: int


def member_slices(cfg: EnvConfig, first_index: int, num_envs: int) -> list[MemberSlice]:
    """The members that envs ``first_index .. first_index + num_envs - 1`` of the batch of ``cfg`` run, in order."""
    parts, start = [], 0
    for env_id, count in zip(cfg.members(), cfg.member_counts()):
        lo, hi = max(start, first_index), min(start + count, first_index + num_envs)
        if lo < hi:
            parts.append(MemberSlice(env_id, lo - start, hi - lo))
        start += count
    if sum(p.num_envs for p in parts) != num_envs:
        raise ValueError(f"envs {first_index}..{first_index + num_envs - 1} are outside the mixture's batch of "
                         f"{cfg.num_envs} envs")
    return parts


def space_difference(first: gym.Space, other: gym.Space) -> str | None:
    """The first observation key (or ``action``) whose space differs, described, or None when they are equal."""
    if isinstance(first, gym.spaces.Dict) and isinstance(other, gym.spaces.Dict):
        for key in sorted(set(first.spaces) | set(other.spaces)):
            a, b = first.spaces.get(key), other.spaces.get(key)
            if a != b:
                return f"observation key {key!r}: {a} against {b}"
        return None
    return None if first == other else f"{first} against {other}"


def check_same_spaces(ids: Sequence[str], observation: Sequence[gym.Space], action: Sequence[gym.Space],
                      where: str) -> None:
    """A ``ValueError`` naming ``where`` (``env.id``), the two members and the key when a member's spaces differ
    from the first member's."""
    for i in range(1, len(ids)):
        for what, spaces in (("observations", observation), ("actions", action)):
            diff = space_difference(spaces[0], spaces[i])
            if diff is not None:
                raise ValueError(f"{where}: the mixture's members {ids[0]} and {ids[i]} differ in their {what}, "
                                 f"{diff}; one policy acts on the whole batch, so members must share spaces")


class ConcatBatchedEnv:
    """Several ``BatchedEnv``s of one mixture stepped as one batch (members whose envs step natively in batches).

    Each part steps its own rows of the chunk; results are joined along the env axis, every episode tagged with
    its part's env id. ``get_state``/``set_state`` and the expert steps pass to the parts when all of them have
    them.
    """

    batched: ClassVar[bool] = True

    def __init__(self, parts: Sequence[Any], env_ids: Sequence[str], name: str = "mixture") -> None:
        self.parts, self.env_ids, self.name = list(parts), list(env_ids), name
        check_same_spaces(self.env_ids, [p.single_observation_space for p in self.parts],
                          [p.single_action_space for p in self.parts], name)
        self.single_observation_space = self.parts[0].single_observation_space
        self.single_action_space = self.parts[0].single_action_space
        self.auto_reset = getattr(self.parts[0], "auto_reset", True)
        self._bounds = np.cumsum([0] + [p.num_envs for p in self.parts])

    @property
    def num_envs(self) -> int:
        return int(self._bounds[-1])

    def _rows(self, i: int) -> slice:
        return slice(int(self._bounds[i]), int(self._bounds[i + 1]))

    def _joined(self, results: list[ChunkStepResult]) -> ChunkStepResult:
        for part, env_id in zip(results, self.env_ids):
            part.episodes[:] = [dataclasses.replace(e, env_id=env_id) for e in part.episodes]
        return ChunkStepResult.concat(results)

    def reset(self, seed: int | None = None, seeds: Sequence[int] | None = None,
              options: Sequence[dict[str, Any] | None] | None = None) -> Obs:
        obs = []
        for i, part in enumerate(self.parts):
            rows = self._rows(i)
            kwargs: dict[str, Any] = {"seed": None if seed is None else seed + rows.start}  # env i: seed + i
            if seeds is not None:
                kwargs = {"seeds": list(seeds[rows])}
            if options is not None:
                kwargs["options"] = list(options[rows])
            obs.append(part.reset(**kwargs))
        return obs_concat(obs)

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        return self._joined([p.chunk_step(actions[self._rows(i)]) for i, p in enumerate(self.parts)])

    def labelled_chunk_step(self, actions: np.ndarray, expert_mix: float = 0.0,
                            rng: np.random.Generator | None = None) -> ChunkStepResult:
        return self._joined([p.labelled_chunk_step(actions[self._rows(i)], expert_mix, rng)
                             for i, p in enumerate(self.parts)])

    def expert_chunk_step(self, chunk: int, noise: float = 0.0,
                          rng: np.random.Generator | None = None) -> tuple[ChunkStepResult, np.ndarray]:
        steps = [p.expert_chunk_step(chunk, noise, rng) for p in self.parts]
        return self._joined([r for r, _ in steps]), np.concatenate([a for _, a in steps])

    def get_state(self) -> bytes:
        """The parts' own states, each prefixed by its length (no pickle of this class's own)."""
        states = [p.get_state() for p in self.parts]
        return b"".join(len(s).to_bytes(8, "little") + s for s in states)

    def set_state(self, state: bytes) -> None:
        states, at = [], 0
        while at < len(state):
            size = int.from_bytes(state[at:at + 8], "little")
            states.append(state[at + 8:at + 8 + size])
            at += 8 + size
        if len(states) != len(self.parts):
            raise ValueError(f"{self.name}: the saved state holds {len(states)} mixture parts, this batch has "
                             f"{len(self.parts)}")
        for part, s in zip(self.parts, states):
            part.set_state(s)

    def render(self) -> list[np.ndarray]:
        return [frame for p in self.parts for frame in p.render()]

    def close(self) -> None:
        for part in self.parts:
            with contextlib.suppress(Exception):
                part.close()

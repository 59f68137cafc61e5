"""Pure shard routing between env ranks and rollout ranks.

Both sides split the global env indices ``0..num_envs`` into contiguous, balanced slices, one
per rank. A shard is the non-empty overlap of one env rank's slice with one rollout rank's
slice: the unit an env rank sends to (and receives actions from) one rollout rank. The two
rank counts are independent and need not divide ``num_envs``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    """Env indices ``start..stop`` (global, stop exclusive) exchanged by one rank pair."""

    env_rank: int
    rollout_rank: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        """Number of envs in the shard."""
        return self.stop - self.start


def rank_slices(n: int, ranks: int) -> list[tuple[int, int]]:
    """Split ``0..n`` into ``ranks`` contiguous ``(start, stop)`` slices, like numpy.array_split.

    The first ``n % ranks`` slices get one extra element; slices are empty when ``ranks > n``.
    """
    if n < 0:
        raise ValueError(f"cannot split {n} items: n must be >= 0")
    if ranks < 1:
        raise ValueError(f"cannot split into {ranks} ranks: ranks must be >= 1")
    base, extra = divmod(n, ranks)
    slices = []
    start = 0
    for rank in range(ranks):
        stop = start + base + (1 if rank < extra else 0)
        slices.append((start, stop))
        start = stop
    return slices


def _check(num_envs: int, env_ranks: int, rollout_ranks: int) -> None:
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    for ranks, side in ((env_ranks, "env"), (rollout_ranks, "rollout")):
        if ranks < 1:
            raise ValueError(f"{side} ranks must be >= 1, got {ranks}")
        if ranks > num_envs:
            raise ValueError(
                f"{ranks} {side} ranks for {num_envs} envs: every rank needs at least one env"
            )


def route(num_envs: int, env_ranks: int, rollout_ranks: int) -> list[Shard]:
    """All shards of ``num_envs`` envs between ``env_ranks`` and ``rollout_ranks``, by start.

    Raises:
        ValueError: if ``num_envs < 1``, a rank count is < 1, or a side has more ranks than
            envs (a rank without envs would wait forever on its channel).
    """
    _check(num_envs, env_ranks, rollout_ranks)
    env_slices = rank_slices(num_envs, env_ranks)
    rollout_slices = rank_slices(num_envs, rollout_ranks)
    shards = []
    e = r = 0
    # Two-pointer sweep: both slice lists tile 0..num_envs, so each step ends at the nearer
    # boundary and advances whichever slice(s) end there.
    while e < env_ranks and r < rollout_ranks:
        start = max(env_slices[e][0], rollout_slices[r][0])
        stop = min(env_slices[e][1], rollout_slices[r][1])
        if stop > start:
            shards.append(Shard(env_rank=e, rollout_rank=r, start=start, stop=stop))
        if env_slices[e][1] == stop:
            e += 1
        if rollout_slices[r][1] == stop:
            r += 1
    return shards


def shards_for_env_rank(shards: Iterable[Shard], rank: int) -> list[Shard]:
    """The shards env rank ``rank`` owns, in start order."""
    return sorted((s for s in shards if s.env_rank == rank), key=lambda s: s.start)


def shards_for_rollout_rank(shards: Iterable[Shard], rank: int) -> list[Shard]:
    """The shards rollout rank ``rank`` owns, in start order."""
    return sorted((s for s in shards if s.rollout_rank == rank), key=lambda s: s.start)

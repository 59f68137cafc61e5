"""Shard routing against a brute-force reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from embodied.channels import Shard, rank_slices, route, shards_for_env_rank, shards_for_rollout_rank


def _owner(index: int, n: int, ranks: int) -> int:
    """Rank owning ``index`` under numpy.array_split."""
    for rank, part in enumerate(np.array_split(np.arange(n), ranks)):
        if index in part:
            return rank
    raise AssertionError(index)


def _reference(n: int, e: int, r: int) -> list[Shard]:
    """Label every env index with its (env rank, rollout rank) and group runs of equal labels."""
    labels = [(_owner(i, n, e), _owner(i, n, r)) for i in range(n)]
    shards, start = [], 0
    for (env_rank, rollout_rank), run in itertools.groupby(labels):
        stop = start + len(list(run))
        shards.append(Shard(env_rank, rollout_rank, start, stop))
        start = stop
    return shards


COMBOS = [
    (n, e, r) for n in range(1, 13) for e in range(1, n + 1) for r in range(1, n + 1)
] + [(10, 3, 4), (7, 7, 1), (5, 2, 3), (64, 5, 7), (100, 8, 3), (33, 33, 33)]


@pytest.mark.parametrize(("n", "ranks"), [(10, 3), (7, 7), (5, 2), (0, 3), (3, 5), (9, 1)])
def test_rank_slices_match_array_split(n: int, ranks: int) -> None:
    parts = np.array_split(np.arange(n), ranks)
    expected = []
    start = 0
    for part in parts:
        expected.append((start, start + len(part)))
        start += len(part)
    assert rank_slices(n, ranks) == expected


def test_route_matches_reference() -> None:
    for n, e, r in COMBOS:
        assert route(n, e, r) == _reference(n, e, r), (n, e, r)


def test_shards_tile_all_envs_once() -> None:
    for n, e, r in COMBOS:
        shards = route(n, e, r)
        covered = [i for s in shards for i in range(s.start, s.stop)]
        assert covered == list(range(n)), (n, e, r)
        assert all(s.size > 0 for s in shards)
        assert sum(s.size for s in shards) == n


def test_per_rank_shards_are_contiguous_and_cover_the_rank_slice() -> None:
    for n, e, r in COMBOS:
        shards = route(n, e, r)
        for side_ranks, pick, key in (
            (e, shards_for_env_rank, "env_rank"),
            (r, shards_for_rollout_rank, "rollout_rank"),
        ):
            for rank, (lo, hi) in enumerate(rank_slices(n, side_ranks)):
                mine = pick(shards, rank)
                assert mine, (n, e, r, key, rank)
                assert all(getattr(s, key) == rank for s in mine)
                assert mine[0].start == lo and mine[-1].stop == hi
                assert all(a.stop == b.start for a, b in zip(mine, mine[1:]))


def test_rank_helpers_sort_by_start() -> None:
    shards = list(reversed(route(10, 3, 4)))
    assert [s.start for s in shards_for_rollout_rank(shards, 1)] == [3, 4]
    assert [s.start for s in shards_for_env_rank(shards, 2)] == [7, 8]


def test_uneven_example() -> None:
    assert route(10, 3, 4) == [
        Shard(0, 0, 0, 3),
        Shard(0, 1, 3, 4),
        Shard(1, 1, 4, 6),
        Shard(1, 2, 6, 7),
        Shard(2, 2, 7, 8),
        Shard(2, 3, 8, 10),
    ]
    assert route(7, 7, 1) == [Shard(i, 0, i, i + 1) for i in range(7)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((4, 5, 1), "5 env ranks for 4 envs: every rank needs at least one env"),
        ((4, 1, 5), "5 rollout ranks for 4 envs: every rank needs at least one env"),
        ((0, 1, 1), "num_envs must be >= 1, got 0"),
        ((4, 0, 1), "env ranks must be >= 1, got 0"),
        ((4, 1, -2), "rollout ranks must be >= 1, got -2"),
    ],
)
def test_invalid_inputs_raise(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        route(*args)


def test_rank_slices_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        rank_slices(4, 0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        rank_slices(-1, 2)

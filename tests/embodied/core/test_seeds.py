"""The seed ranges of a run never meet: no training reset (first, GRPO iteration, restarted or rebuilt worker)
starts where an eval episode does, over 10^6 iterations and 10^3 restarts."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.core import seeds

SEED = 12345


def span(bases: np.ndarray, width: int) -> tuple[int, int]:
    """[low, high) of every seed ``base + i`` for i < width."""
    return int(bases.min()), int(bases.max()) + width


def test_the_seeds_runs_draw_fall_in_disjoint_ranges():
    iterations = np.array([seeds.iteration_seed(SEED, k) for k in range(1, 10**6 + 1)])
    restarts = np.array([seeds.restart_seed(SEED, r) for r in range(1, 10**3 + 1)])
    fresh = np.array([seeds.fresh_seed(SEED, r) for r in range(1, 10**3 + 1)])
    used = {
        "training": (SEED, SEED + seeds.MAX_ENVS),
        "eval": span(np.array([seeds.eval_seed(SEED, 0), seeds.eval_seed(SEED, seeds.EVAL_EPISODES - 1)]), 1),
        "iteration": span(iterations, seeds.MAX_GROUPS),
        "restart": span(restarts, seeds.MAX_ENVS),
        "fresh": span(fresh, seeds.MAX_ENVS),
    }
    # within a kind, consecutive bases are a whole batch apart: two iterations' (restarts') resets never share a seed
    assert (np.diff(iterations) >= seeds.MAX_GROUPS).all() and (np.diff(restarts) >= seeds.MAX_ENVS).all()
    assert all((b - SEED) % 1000 == 0 for b in (*iterations[:9], *restarts[:9], *fresh[:9], seeds.eval_seed(SEED, 0)))
    ordered = sorted(used.items(), key=lambda kv: kv[1])
    for (a, (_, high)), (b, (low, _)) in zip(ordered, ordered[1:]):
        assert high <= low, f"{a} meets {b}"
    assert max(h for _, h in used.values()) < 2**32  # numpy's RandomState seeds
    collect = (seeds.collect_seed(SEED, 0), seeds.collect_seed(SEED, seeds.COLLECT_EPISODES - 1) + seeds.MAX_ENVS)
    assert collect[1] <= used["eval"][0]  # demonstrations never start from an eval episode's state


def test_the_declared_ranges_are_disjoint_but_collect_which_is_training_data():
    declared = {k: v for k, v in seeds.ranges().items() if k != "collect"}
    ordered = sorted(declared.values())
    assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:]))


@pytest.mark.parametrize("call,limit", [(seeds.eval_seed, seeds.EVAL_EPISODES), (seeds.restart_seed, seeds.RESTARTS),
                                        (seeds.iteration_seed, seeds.ITERATIONS)])
def test_an_index_past_its_range_is_refused(call, limit):
    call(SEED, limit - 1)
    with pytest.raises(ValueError, match="outside the seed range"):
        call(SEED, limit)

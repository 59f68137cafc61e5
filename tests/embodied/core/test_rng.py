"""Each worker's own random stream (``embodied.core.rng``): per-thread, restorable, and what policies draw from."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.distributions import Beta, Categorical, Independent, Normal

from embodied.core import rng


def test_each_thread_draws_from_its_own_stream_whatever_the_others_do():
    alone = {s: [torch.randn(4, generator=torch.Generator().manual_seed(s))] for s in (1, 2)}
    results: dict[int, list[torch.Tensor]] = {1: [], 2: []}
    barrier = threading.Barrier(3)

    def worker(seed: int) -> None:
        with rng.drawing(rng.RandomStream(seed)):
            barrier.wait()
            for _ in range(200):
                results[seed].append(rng.randn((4,)))

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    torch.manual_seed(0)
    barrier.wait()
    for _ in range(200):
        torch.randn(4)  # the main thread draws from the global generator meanwhile
    for t in threads:
        t.join()
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        expected = torch.stack([torch.randn(4, generator=g) for _ in range(200)])
        assert torch.equal(torch.stack(results[seed]), expected)
        assert torch.equal(results[seed][0], alone[seed][0])


def test_without_a_stream_draws_come_from_the_global_generator_as_before():
    torch.manual_seed(3)
    a = rng.randn((5,))
    dist = Normal(torch.zeros(5), torch.ones(5))
    b = rng.sample(dist)
    torch.manual_seed(3)
    assert torch.equal(a, torch.randn(5)) and torch.equal(b, dist.sample())
    assert rng.active_stream() is None and rng.current_generator() is None


def test_sample_draws_normals_and_categoricals_from_the_stream_and_refuses_others():
    loc, scale = torch.arange(6.0).view(2, 3), torch.full((2, 3), 0.5, requires_grad=True)
    with rng.drawing(rng.RandomStream(7)):
        x = rng.sample(Independent(Normal(loc, scale), 1))
        c = rng.sample(Categorical(logits=torch.tensor([[0.0, 0.0, 9.0], [9.0, 0.0, 0.0]])))
        with pytest.raises(TypeError, match="Beta is not drawn from a worker's stream"):
            rng.sample(Beta(torch.ones(2), torch.ones(2)))
    g = torch.Generator().manual_seed(7)
    assert torch.equal(x, loc + 0.5 * torch.randn(2, 3, generator=g)) and not x.requires_grad
    assert c.shape == (2,) and c.tolist() == [2, 0]


def test_a_stream_s_state_round_trips_and_a_bare_tensor_sets_its_cpu_generator():
    stream = rng.RandomStream(5)
    with rng.drawing(stream):
        rng.randn((3,))
        state = stream.get_state()
        expected = rng.randn((3,))
    again = rng.RandomStream(99)
    again.set_state(state)
    with rng.drawing(again):
        assert torch.equal(rng.randn((3,)), expected)
    legacy = rng.RandomStream(99)
    legacy.set_state(state["cpu"])  # a checkpoint of before the streams held the CPU generator's tensor
    with rng.drawing(legacy):
        assert torch.equal(rng.randn((3,)), expected)


def test_seeded_builds_under_its_seed_and_leaves_the_global_stream_where_it_was():
    torch.manual_seed(11)
    expected_next = torch.randn(3)
    torch.manual_seed(11)
    with rng.seeded(4):
        built = torch.randn(3)
    assert torch.equal(built, torch.randn(3, generator=torch.Generator().manual_seed(4)))
    assert torch.equal(torch.randn(3), expected_next)

"""The replay ring buffer: filled from trajectories, bounded, reproducible sampling, checkpointable."""

from __future__ import annotations

import pytest
import torch

from embodied.replay import ReplayBuffer
from embodied.types import Trajectory


def trajectory(T=3, N=2, C=2, A=1, start=0.0, executed=None, terminated=None) -> Trajectory:
    """T chunk steps of N envs; states hold ``start + t * N + n`` so rows can be told apart."""
    ids = start + torch.arange(T * N, dtype=torch.float32).reshape(T, N)
    executed = torch.ones(T, N, C, dtype=torch.bool) if executed is None else executed
    terminated = torch.zeros(T, N, dtype=torch.bool) if terminated is None else terminated
    return Trajectory(
        forward_inputs={}, actions=ids[..., None, None].expand(T, N, C, A).clone(), logprobs=torch.zeros(T, N),
        values=torch.zeros(T, N), rewards=torch.ones(T, N, C), executed=executed, dones=terminated.clone(),
        terminated=terminated, final_values=torch.zeros(T, N), next_values=torch.zeros(N), version=0,
        observations={"states": ids[..., None], "main_images": torch.full((T, N, 2, 2, 3), 7, dtype=torch.uint8)},
        next_observations={"states": ids[..., None] + 100, "main_images": torch.zeros(T, N, 2, 2, 3, dtype=torch.uint8)})


def test_add_computes_chunk_rewards_and_keeps_dtypes():
    executed = torch.ones(3, 2, 2, dtype=torch.bool)
    executed[1, 0, 1] = False  # the episode ended after one sub-step
    terminated = torch.zeros(3, 2, dtype=torch.bool)
    terminated[1, 0] = True
    replay = ReplayBuffer(10)
    assert replay.add(trajectory(executed=executed, terminated=terminated), gamma=0.5) == 6
    s = replay.storage
    assert s["obs/main_images"].dtype == torch.uint8 and s["obs/states"].dtype == torch.float32
    row = 2  # t=1, n=0
    assert float(s["reward"][row]) == 1.0 and float(s["discount"][row]) == 0.5 and not s["bootstrap"][row]
    assert float(s["reward"][0]) == 1.5 and float(s["discount"][0]) == 0.25 and s["bootstrap"][0]
    assert float(s["next_obs/states"][row, 0]) == 102.0


def test_chunk_steps_that_executed_nothing_are_left_out():
    executed = torch.ones(3, 2, 2, dtype=torch.bool)
    executed[2, 1] = False  # no auto-reset: a done env executes nothing
    replay = ReplayBuffer(10)
    assert replay.add(trajectory(executed=executed), 0.9) == 5 and len(replay) == 5


def test_ring_overwrites_the_oldest_rows():
    replay = ReplayBuffer(8)
    replay.add(trajectory(start=0.0), 0.9)  # rows 0..5
    replay.add(trajectory(start=10.0), 0.9)  # 10..15: two wrap around over 0 and 1
    assert len(replay) == 8 and replay.added == 12 and replay.position == 4
    assert sorted(replay.storage["obs/states"][:, 0].tolist()) == [4, 5, 10, 11, 12, 13, 14, 15]


def test_more_rows_than_capacity_keep_the_newest():
    replay = ReplayBuffer(4)
    replay.add(trajectory(start=0.0), 0.9)
    assert sorted(replay.storage["obs/states"][:, 0].tolist()) == [2, 3, 4, 5]


def test_sampling_is_reproducible_with_a_generator():
    replay = ReplayBuffer(16)
    replay.add(trajectory(), 0.9)
    a = replay.sample(32, torch.Generator().manual_seed(3))
    b = replay.sample(32, torch.Generator().manual_seed(3))
    c = replay.sample(32, torch.Generator().manual_seed(4))
    assert torch.equal(a.obs["states"], b.obs["states"]) and not torch.equal(a.obs["states"], c.obs["states"])
    assert a.actions.shape == (32, 2, 1) and a.obs["main_images"].dtype == torch.uint8
    # every sampled row is one transition: its action, obs and next obs belong together
    assert torch.equal(a.actions[:, 0, 0], a.obs["states"][:, 0])
    assert torch.equal(a.next_obs["states"], a.obs["states"] + 100)


def test_state_dict_round_trip_samples_the_same():
    replay = ReplayBuffer(8)
    replay.add(trajectory(), 0.9)
    replay.add(trajectory(start=10.0), 0.9)
    restored = ReplayBuffer(8)
    restored.load_state_dict(replay.state_dict())
    assert (restored.size, restored.position, restored.added) == (replay.size, replay.position, replay.added)
    a = replay.sample(8, torch.Generator().manual_seed(0))
    b = restored.sample(8, torch.Generator().manual_seed(0))
    assert torch.equal(a.obs["states"], b.obs["states"]) and torch.equal(a.reward, b.reward)
    restored.add(trajectory(start=20.0), 0.9)  # and goes on filling where it stopped
    replay.add(trajectory(start=20.0), 0.9)
    assert torch.equal(restored.storage["obs/states"], replay.storage["obs/states"])


def test_errors_are_clear():
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)
    replay = ReplayBuffer(4)
    with pytest.raises(ValueError, match="empty"):
        replay.sample(1, torch.Generator())
    plain = trajectory()
    plain.observations = None
    with pytest.raises(ValueError, match="record_observations"):
        replay.add(plain, 0.9)
    with pytest.raises(ValueError, match="replay_capacity"):
        ReplayBuffer(5).load_state_dict(replay.state_dict())

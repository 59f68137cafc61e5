"""The replay ring buffer: filled from trajectories, bounded, reproducible sampling, checkpointable."""

from __future__ import annotations

import pytest
import torch

from embodied.core.types import Trajectory
from embodied.replay.buffer import ReplayBuffer


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


def test_bootstrap_terminations_makes_a_terminated_row_bootstrap_from_its_final_obs():
    terminated = torch.zeros(3, 2, dtype=torch.bool)
    terminated[1, 0] = True
    plain, always = ReplayBuffer(6), ReplayBuffer(6)
    plain.add(trajectory(terminated=terminated), gamma=0.5, n_step=2)
    always.add(trajectory(terminated=terminated), gamma=0.5, n_step=2, bootstrap_terminations=True)
    row = 2  # t=1, n=0: the episode terminated here
    assert not plain.storage["bootstrap"][row] and bool(always.storage["bootstrap"][:6].all())
    assert float(always.storage["next_obs/states"][row, 0]) == 102.0  # its final obs
    # the window of the row before still stops at the termination: only the bootstrap flag differs
    for key in set(plain.storage) - {"bootstrap"}:
        assert torch.equal(plain.storage[key], always.storage[key]), key


def test_n_step_rows_bootstrap_from_the_windows_last_next_obs():
    T, N = 4, 2
    dones = torch.zeros(T, N, dtype=torch.bool)
    dones[1, 0] = True  # env 0 truncated in chunk step 1 (final_obs in next_observations there)
    replay = ReplayBuffer(16)
    traj = trajectory(T=T, N=N)
    traj.dones = dones
    assert replay.add(traj, gamma=0.5, n_step=3) == 8
    s = replay.storage
    # rows t-major: row t * N + n. Env 1 at t=0: chunks 0, 1, 2 (two sub-steps of reward 1 each)
    assert float(s["reward"][1]) == pytest.approx(sum(0.5 ** k for k in range(6)))
    assert float(s["discount"][1]) == 0.5 ** 6 and float(s["next_obs/states"][1, 0]) == 100 + 2 * N + 1
    # env 0 at t=0: its episode ended in chunk 1, so the window stops there and bootstraps (a truncation)
    assert float(s["discount"][0]) == 0.5 ** 4 and bool(s["bootstrap"][0])
    assert float(s["next_obs/states"][0, 0]) == 100 + 1 * N + 0
    # env 1 at t=3: the epoch ends, so one chunk
    assert float(s["discount"][7]) == 0.5 ** 2 and float(s["next_obs/states"][7, 0]) == 100 + 3 * N + 1
    assert torch.equal(s["obs/states"][:8, 0], torch.arange(8.0))  # obs and actions stay the row's own


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


def filled(capacity=8, adds=2) -> ReplayBuffer:
    replay = ReplayBuffer(capacity)
    for k in range(adds):
        replay.add(trajectory(start=10.0 * k), 0.9)
    return replay


ROW_BYTES = 2 * 4 + 4 + 4 + 1 + 2 * (4 + 12)  # actions [2, 1], reward, discount, bootstrap, obs and next obs


def test_save_and_load_round_trip_in_chunks(tmp_path):
    replay = filled(capacity=8, adds=2)  # full and wrapped: position 4
    counts = replay.save(tmp_path / "r", chunk_bytes=3 * ROW_BYTES)  # 3 rows a chunk: 3 + 3 + 2
    assert counts == {"written": 3, "linked": 0}
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "chunk_000000.bin", "chunk_000001.bin", "chunk_000002.bin", "replay.json"]
    assert [(tmp_path / "r" / f"chunk_00000{i}.bin").stat().st_size for i in range(3)] == [3 * ROW_BYTES] * 2 + [
        2 * ROW_BYTES]
    restored = ReplayBuffer(8)
    restored.load(tmp_path / "r")
    assert (restored.size, restored.position, restored.added) == (8, 4, 12)
    assert restored.storage.keys() == replay.storage.keys()
    for key, value in replay.storage.items():
        assert restored.storage[key].dtype == value.dtype and torch.equal(restored.storage[key], value), key
    a = replay.sample(16, torch.Generator().manual_seed(1))
    b = restored.sample(16, torch.Generator().manual_seed(1))
    assert torch.equal(a.obs["main_images"], b.obs["main_images"]) and torch.equal(a.bootstrap, b.bootstrap)


def test_a_partly_filled_buffer_saves_its_rows_and_goes_on_filling(tmp_path):
    replay = filled(capacity=20, adds=1)  # 6 of 20 rows
    replay.save(tmp_path / "r", chunk_bytes=4 * ROW_BYTES)
    restored = ReplayBuffer(20)
    restored.load(tmp_path / "r")
    for r in (replay, restored):
        r.add(trajectory(start=50.0), 0.9)
    for key, value in replay.storage.items():
        assert torch.equal(restored.storage[key], value), key
    empty = ReplayBuffer(4)
    empty.save(tmp_path / "empty")
    again = ReplayBuffer(4)
    again.load(tmp_path / "empty")
    assert len(again) == 0


def test_unchanged_chunks_are_hard_linked_from_the_previous_save(tmp_path):
    replay = filled(capacity=12, adds=2)  # rows 0..11 full, position 0
    first = tmp_path / "iter_1"
    assert replay.save(first, chunk_bytes=3 * ROW_BYTES) == {"written": 4, "linked": 0}
    replay.add(trajectory(T=2, N=2, start=90.0), 0.9)  # 4 rows over 0..3: chunks 0 and 1 change
    second = tmp_path / "iter_2"
    assert replay.save(second, previous=first, chunk_bytes=3 * ROW_BYTES) == {"written": 2, "linked": 2}
    for name in ("chunk_000002.bin", "chunk_000003.bin"):
        assert (second / name).stat().st_ino == (first / name).stat().st_ino
    assert (second / "chunk_000000.bin").stat().st_ino != (first / "chunk_000000.bin").stat().st_ino
    import shutil  # deleting the first save leaves the second whole

    shutil.rmtree(first)
    restored = ReplayBuffer(12)
    restored.load(second)
    for key, value in replay.storage.items():
        assert torch.equal(restored.storage[key], value), key


def test_a_damaged_previous_chunk_is_written_again_not_linked(tmp_path):
    replay = filled(capacity=12, adds=2)
    first = tmp_path / "iter_1"
    replay.save(first, chunk_bytes=3 * ROW_BYTES)
    damaged = first / "chunk_000002.bin"
    data = bytearray(damaged.read_bytes())
    data[0] ^= 0xFF
    damaged.write_bytes(bytes(data))
    counts = replay.save(tmp_path / "iter_2", previous=first, chunk_bytes=3 * ROW_BYTES)
    assert counts == {"written": 1, "linked": 3}
    restored = ReplayBuffer(12)
    restored.load(tmp_path / "iter_2")
    assert torch.equal(restored.storage["obs/states"], replay.storage["obs/states"])
    # another chunk size (or other fields) reuses nothing
    assert replay.save(tmp_path / "iter_3", previous=tmp_path / "iter_2", chunk_bytes=4 * ROW_BYTES)["linked"] == 0


def test_loading_a_damaged_folder_names_the_file(tmp_path):
    replay = filled(capacity=8, adds=2)
    replay.save(tmp_path / "r", chunk_bytes=3 * ROW_BYTES)
    chunk = tmp_path / "r" / "chunk_000001.bin"
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"chunk_000001\.bin: shorter"):
        ReplayBuffer(8).load(tmp_path / "r")
    chunk.write_bytes(b"\0" * 3 * ROW_BYTES)
    with pytest.raises(ValueError, match=r"chunk_000001\.bin: checksum mismatch"):
        ReplayBuffer(8).load(tmp_path / "r")
    with pytest.raises(ValueError, match="replay_capacity"):
        ReplayBuffer(9).load(tmp_path / "r")
    with pytest.raises(ValueError, match=r"replay\.json"):
        ReplayBuffer(8).load(tmp_path / "missing")

"""A ``BatchedEnv`` of one's own (the toy ``PointMassBatch``) against the chunk-step contract: seeding, shapes,
sub-actions, mid-chunk ends, auto-reset on and off, episode statistics and images."""

from __future__ import annotations

import numpy as np
import pytest
from tests.toy_batched import PointMassBatch

from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS


def make(num_envs: int = 3, auto_reset: bool = True, max_steps: int = 50, **kwargs) -> PointMassBatch:
    venv = PointMassBatch(num_envs=num_envs, auto_reset=auto_reset, max_episode_steps=max_steps, **kwargs)
    venv.reset(seed=0)
    return venv


def place(venv: PointMassBatch, i: int, pos, goal) -> None:
    venv.pos[i], venv.goal[i] = pos, goal


def right(num_envs: int, chunk: int) -> np.ndarray:
    """Every sub-action moves +x at full speed."""
    actions = np.zeros((num_envs, chunk, 2), dtype=np.float32)
    actions[..., 0] = 1.0
    return actions


def test_reset_seeds_env_i_with_seed_plus_i():
    a, b = PointMassBatch(num_envs=3), PointMassBatch(num_envs=2)
    obs_a, obs_b = a.reset(seed=10), b.reset(seed=11)
    np.testing.assert_array_equal(obs_a[STATES][1:], obs_b[STATES])  # env 1 of a == env 0 of b (seed 11)
    np.testing.assert_array_equal(a.reset(seed=10)[STATES], obs_a[STATES])
    assert obs_a[STATES].dtype == np.float32 and obs_a[STATES].shape == (3, 6)
    assert obs_a[TASK_DESCRIPTIONS] == ["move the point to the goal"] * 3
    assert a.single_observation_space[STATES].contains(obs_a[STATES][0])


def test_chunk_step_before_reset_and_bad_shapes_fail():
    venv = PointMassBatch(num_envs=2)
    with pytest.raises(RuntimeError, match="reset"):
        venv.chunk_step(right(2, 1))
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"\[2, C, 2\]"):
        venv.chunk_step(np.zeros((3, 1, 2), np.float32))
    with pytest.raises(ValueError, match=r"\[2, C, 2\]"):
        venv.chunk_step(np.zeros((2, 0, 2), np.float32))


def test_full_chunk_runs_every_sub_action():
    venv = make(2)
    place(venv, 0, (0.0, 0.5), (1.0, 0.5))
    place(venv, 1, (0.0, 0.2), (1.0, 0.9))
    out = venv.chunk_step(right(2, 4))
    assert out.executed.all() and not out.dones.any()
    assert out.final_obs is None and out.episodes == []
    np.testing.assert_allclose(out.obs[STATES][0, :2], [0.4, 0.5], atol=1e-6)
    np.testing.assert_allclose(out.rewards[0], [-0.9, -0.8, -0.7, -0.6], atol=1e-6)
    assert out.rewards.dtype == np.float32 and out.rewards.shape == (2, 4)
    assert venv.t.tolist() == [4, 4]


def test_mid_chunk_termination_stops_sub_actions_and_auto_resets():
    venv = make(2)
    place(venv, 0, (0.0, 0.5), (0.3, 0.5))  # reached after 3 sub-steps of 0.1
    place(venv, 1, (0.0, 0.2), (1.0, 0.9))
    out = venv.chunk_step(right(2, 5))
    np.testing.assert_array_equal(out.executed[0], [True, True, True, False, False])
    np.testing.assert_array_equal(out.terminations[0], [False, False, True, False, False])
    assert not out.truncations.any()
    np.testing.assert_allclose(out.rewards[0, :3], [-0.2, -0.1, 0.0], atol=1e-6)
    assert (out.rewards[0, 3:] == 0).all()
    np.testing.assert_array_equal(out.dones, [True, False])
    assert out.terminated.tolist() == [True, False] and not out.truncated.any()
    # final_obs holds the terminal observation; obs is the new episode's first one.
    np.testing.assert_allclose(out.final_obs[STATES][0, :2], [0.3, 0.5], atol=1e-6)
    assert not np.allclose(out.obs[STATES][0, :2], [0.3, 0.5])
    assert venv.t[0] == 0 and np.linalg.norm(venv.goal[0] - venv.pos[0]) > venv.success_threshold
    # A row of an env that is not done repeats its next obs.
    np.testing.assert_array_equal(out.final_obs[STATES][1], out.obs[STATES][1])
    assert out.executed[1].all()
    [ep] = out.episodes
    assert (ep.env_index, ep.length, ep.success_once, ep.success_at_end) == (0, 3, True, True)
    assert ep.episode_return == pytest.approx(-0.3, abs=1e-6)


def test_truncation_at_max_episode_steps():
    venv = make(1, max_steps=3)
    place(venv, 0, (0.0, 0.5), (1.0, 0.5))
    out = venv.chunk_step(right(1, 2))
    assert not out.dones.any()
    out = venv.chunk_step(right(1, 2))
    np.testing.assert_array_equal(out.executed[0], [True, False])
    np.testing.assert_array_equal(out.truncations[0], [True, False])
    assert out.truncated[0] and not out.terminated[0]
    [ep] = out.episodes
    assert ep.length == 3 and not ep.success_once and not ep.success_at_end
    np.testing.assert_allclose(out.final_obs[STATES][0, :2], [0.3, 0.5], atol=1e-6)


def test_auto_reset_off_keeps_done_envs_done_until_reset():
    venv = make(2, auto_reset=False)
    place(venv, 0, (0.0, 0.5), (0.2, 0.5))
    place(venv, 1, (0.0, 0.2), (1.0, 0.9))
    out = venv.chunk_step(right(2, 4))
    np.testing.assert_array_equal(out.executed[0], [True, True, False, False])
    assert out.dones.tolist() == [True, False]
    terminal = out.obs[STATES][0].copy()
    np.testing.assert_allclose(terminal[:2], [0.2, 0.5], atol=1e-6)  # obs stays terminal
    np.testing.assert_array_equal(out.final_obs[STATES][0], terminal)
    assert len(out.episodes) == 1
    # Later chunks execute nothing for the done env and report it done no more.
    out = venv.chunk_step(right(2, 4))
    assert not out.executed[0].any() and (out.rewards[0] == 0).all()
    assert out.dones.tolist() == [False, False] and out.episodes == [] and out.final_obs is None
    np.testing.assert_array_equal(out.obs[STATES][0], terminal)
    assert out.executed[1].all()
    # reset() brings it back.
    venv.reset(seed=0)
    assert venv.chunk_step(right(2, 1)).executed.all()


def test_all_envs_done_executes_nothing():
    venv = make(2, auto_reset=False, max_steps=1)
    out = venv.chunk_step(right(2, 3))
    assert out.executed.tolist() == [[True, False, False]] * 2 and out.dones.all() and len(out.episodes) == 2
    out = venv.chunk_step(right(2, 3))
    assert not out.executed.any() and not out.dones.any()


def test_episode_stats_over_several_chunks_and_index_rebasing():
    venv = make(3, max_steps=5)
    for i in range(3):
        place(venv, i, (0.0, 0.1 * (i + 1)), (1.0, 0.9))
    first = venv.chunk_step(right(3, 3))
    second = venv.chunk_step(right(3, 3))
    assert first.episodes == [] and second.dones.all()
    assert [e.env_index for e in second.episodes] == [0, 1, 2]
    assert all(e.length == 5 for e in second.episodes)
    rewards = np.concatenate([first.rewards, second.rewards], axis=1)
    for e in second.episodes:
        assert e.episode_return == pytest.approx(float(rewards[e.env_index].sum()), abs=1e-5)
    # slicing a result re-bases its episodes, as env workers do when splitting shards
    part = second.slice(1, 3)
    assert [e.env_index for e in part.episodes] == [0, 1]


def test_rgb_observations_and_render():
    venv = PointMassBatch(num_envs=2, obs_mode="state+rgb", image_size=12)
    obs = venv.reset(seed=1)
    assert obs[MAIN_IMAGES].shape == (2, 12, 12, 3) and obs[MAIN_IMAGES].dtype == np.uint8
    assert obs[MAIN_IMAGES].max() == 255
    frames = venv.render()
    assert len(frames) == 2 and frames[0].shape == (32, 32, 3) and frames[0].dtype == np.uint8
    venv.close()
    assert venv.closed
    rgb_only = PointMassBatch(num_envs=1, obs_mode="rgb")
    assert STATES not in rgb_only.reset(seed=0)

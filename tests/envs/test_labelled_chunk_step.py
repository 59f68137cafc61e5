"""``ChunkedVectorEnv.labelled_chunk_step``: the policy's chunk runs, and the env's scripted expert labels every
state it visits (what DAgger trains on); with ``expert_mix`` the expert acts whole chunks instead."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.envs.chunked import ChunkedVectorEnv
from embodied.envs.experts import expert_for
from embodied.envs.pick_place import PickPlaceEnv


def make(n: int, auto_reset: bool = True) -> ChunkedVectorEnv:
    return ChunkedVectorEnv([lambda: PickPlaceEnv(obs_mode="state", max_episode_steps=30) for _ in range(n)],
                            auto_reset=auto_reset)


def test_the_policys_chunk_runs_and_each_visited_state_gets_the_experts_label():
    labelled, plain = make(2), make(2)
    labelled.reset(seed=5)
    plain.reset(seed=5)
    rng = np.random.default_rng(0)
    env = PickPlaceEnv(obs_mode="state", max_episode_steps=30)  # env 0 again, one sub-step at a time
    obs, _ = env.reset(seed=5)
    expert = expert_for(env)
    expert.reset(env)
    for _ in range(12):
        actions = rng.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
        result = labelled.labelled_chunk_step(actions, 0.0)
        again = plain.chunk_step(actions)  # the policy's actions ran: the same outcome as without labels
        for field in ("rewards", "executed", "dones"):
            np.testing.assert_array_equal(getattr(result, field), getattr(again, field))
        np.testing.assert_array_equal(result.obs["states"], again.obs["states"])
        assert result.expert_actions.shape == (2, 3, 4) and again.expert_actions is None
        assert not result.expert_actions[~result.executed].any()  # 0 where a sub-step did not run
        for c in range(3):
            if not result.executed[0, c]:
                break
            np.testing.assert_array_equal(result.expert_actions[0, c], expert.act(env, obs))  # on that very state
            obs, _, terminated, truncated, _ = env.step(actions[0, c])
            if terminated or truncated:
                obs, _ = env.reset()
                expert.reset(env)


def test_with_mix_one_the_expert_acts_every_chunk_closed_loop():
    labelled, experts = make(3, auto_reset=False), make(3, auto_reset=False)
    labelled.reset(seed=2)
    experts.reset(seed=2)
    for _ in range(8):
        result = labelled.labelled_chunk_step(np.zeros((3, 4, 4), np.float32), 1.0)
        reference, taken = experts.expert_chunk_step(4)
        np.testing.assert_array_equal(result.expert_actions, taken)
        np.testing.assert_array_equal(result.obs["states"], reference.obs["states"])


def test_the_mixture_picks_whole_chunks_per_env_from_its_stream():
    venv = make(64)
    venv.reset(seed=0)
    policy = np.full((64, 2, 4), 0.5, np.float32)
    before = venv.envs[0].unwrapped.tcp_target.copy()
    result = venv.labelled_chunk_step(policy, 0.5, np.random.default_rng(3))
    # an env whose chunk was the expert's moved as its labels say; the others as the policy's 0.5s
    by_expert = np.random.default_rng(3).random(64) < 0.5
    assert 10 < by_expert.sum() < 54
    moved = venv.envs[0].unwrapped.tcp_target - before
    assert np.allclose(moved / venv.envs[0].unwrapped.max_step, result.expert_actions[0, :, :3].sum(0), atol=1e-6) \
        if by_expert[0] else np.allclose(moved / venv.envs[0].unwrapped.max_step, 1.0, atol=1e-6)
    with pytest.raises(ValueError, match=r"expert_mix must be in \[0, 1\]"):
        venv.labelled_chunk_step(policy, 1.5)


def test_a_result_slice_and_concat_keep_the_labels():
    venv = make(4)
    venv.reset(seed=1)
    result = venv.labelled_chunk_step(np.zeros((4, 2, 4), np.float32))
    parts = [result.slice(0, 1), result.slice(1, 4)]
    np.testing.assert_array_equal(type(result).concat(parts).expert_actions, result.expert_actions)
    assert parts[1].expert_actions.shape == (3, 2, 4)


class _GoLeft:
    """A user's expert: always -1 on the first action dimension."""

    def reset(self, env) -> None:
        pass

    def act(self, env, obs) -> np.ndarray:
        return np.array([-1.0, 0.0, 0.0, 1.0], np.float32)


class _MyReach(PickPlaceEnv):
    scripted_expert = _GoLeft  # how an env of any package offers its expert


def test_an_env_class_of_any_package_offers_its_own_expert():
    from embodied.envs.experts import has_expert

    venv = ChunkedVectorEnv([lambda: _MyReach(obs_mode="state", max_episode_steps=30)], auto_reset=True)
    venv.reset(seed=0)
    result = venv.labelled_chunk_step(np.zeros((1, 2, 4), np.float32))
    np.testing.assert_array_equal(result.expert_actions[0], [[-1, 0, 0, 1], [-1, 0, 0, 1]])
    assert has_expert(_MyReach) and isinstance(expert_for(_MyReach(obs_mode="state")), _GoLeft)

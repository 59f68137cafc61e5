"""``ChunkedVectorEnv.expert_chunk_step``: the chunk-step contract, with each env's expert acting per sub-step."""

from __future__ import annotations

import numpy as np
import pytest

from embodied.envs.chunked import ChunkedVectorEnv
from embodied.envs.experts import expert_for
from embodied.envs.pick_place import PickPlaceEnv


def make(n: int) -> ChunkedVectorEnv:
    return ChunkedVectorEnv([lambda: PickPlaceEnv(obs_mode="state", max_episode_steps=60) for _ in range(n)],
                            auto_reset=False)


def test_expert_chunks_are_closed_loop_and_replay_through_chunk_step():
    experts, replay = make(3), make(3)
    experts.reset(seed=11)
    replay.reset(seed=11)
    for _ in range(20):
        result, actions = experts.expert_chunk_step(4)
        assert actions.dtype == np.float32 and actions.shape == (3, 4, 4)
        assert not actions[~result.executed].any()  # 0 where a sub-step did not run
        again = replay.chunk_step(actions)  # the same contract, one loop: identical outcome
        for field in ("rewards", "terminations", "truncations", "executed", "dones"):
            np.testing.assert_array_equal(getattr(result, field), getattr(again, field))
        np.testing.assert_array_equal(result.obs["states"], again.obs["states"])
        assert [(e.env_index, e.success_once) for e in result.episodes] == \
               [(e.env_index, e.success_once) for e in again.episodes]
        if experts.finished.all():
            break
    assert experts.finished.all() and not experts.expert_chunk_step(4)[0].executed.any()


def test_the_expert_acts_on_the_state_after_every_sub_step():
    venv = make(1)
    venv.reset(seed=4)
    _, chunked = venv.expert_chunk_step(5)
    env = PickPlaceEnv(obs_mode="state", max_episode_steps=60)
    obs, _ = env.reset(seed=4)
    expert = expert_for(env)
    expert.reset(env)
    for c in range(5):  # one sub-step at a time, asking the expert each time
        action = expert.act(env, obs)
        np.testing.assert_array_equal(chunked[0, c], action)
        obs, *_ = env.step(action)


def test_experts_restart_with_every_reset_and_need_a_reset_first():
    venv = make(1)
    with pytest.raises(RuntimeError, match="call reset"):
        venv.expert_chunk_step(4)
    venv.reset(seed=0)
    first = [venv.expert_chunk_step(1)[1]]
    while venv.experts[0].phase != "close":  # mid-grasp: a stale expert would keep closing the fingers
        first.append(venv.expert_chunk_step(1)[1])
    venv.reset(seed=0)
    again = [venv.expert_chunk_step(1)[1] for _ in first]
    np.testing.assert_array_equal(np.concatenate(first), np.concatenate(again))
    with pytest.raises(ValueError, match="chunk length must be >= 1"):
        venv.expert_chunk_step(0)


def test_noise_perturbs_what_runs_but_records_the_experts_action():
    """DART: the env executes expert + noise; the record is the expert's action in the state it reached."""
    venv = make(1)
    venv.reset(seed=3)
    _, noisy = venv.expert_chunk_step(5, noise=0.1, rng=np.random.default_rng(0))
    env = PickPlaceEnv(obs_mode="state", max_episode_steps=60)
    obs, _ = env.reset(seed=3)
    expert = expert_for(env)
    expert.reset(env)
    rng = np.random.default_rng(0)
    for c in range(5):
        action = expert.act(env, obs)
        np.testing.assert_array_equal(noisy[0, c], action)  # recorded: the expert's own action
        ran = np.clip(action + 0.1 * rng.standard_normal(4).astype(np.float32), -1, 1)  # half range is 1 here
        obs, *_ = env.step(ran)
    np.testing.assert_allclose(venv.envs[0].unwrapped.tcp_pos, env.unwrapped.tcp_pos)  # the same noise ran
    clean = make(1)
    clean.reset(seed=3)
    _, plain = clean.expert_chunk_step(5)
    assert not np.array_equal(plain, noisy)  # the noisy states made the expert correct itself
    with pytest.raises(ValueError, match="noise must be >= 0"):
        venv.expert_chunk_step(4, noise=-0.1)

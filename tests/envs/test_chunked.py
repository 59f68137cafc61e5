"""Every rule of the chunk-step contract, pinned on a tiny deterministic env."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from tests.toy_envs import CountingEnv

from embodied.envs.chunked import ChunkedVectorEnv


def make(limits: list[tuple[int, int]], auto_reset: bool = True, success_at: int = 10**9) -> ChunkedVectorEnv:
    """One CountingEnv per (terminate_at, truncate_at)."""
    fns = [partial(CountingEnv, terminate_at=te, truncate_at=tr, success_at=success_at) for te, tr in limits]
    venv = ChunkedVectorEnv(fns, auto_reset=auto_reset, name="Counting")
    venv.reset(seed=0)
    return venv


def ramp(num_envs: int, chunk: int, dim: int = 2) -> np.ndarray:
    """Actions whose first component is 1, 2, ..., C, so rewards show which sub-steps ran."""
    actions = np.zeros((num_envs, chunk, dim), dtype=np.float32)
    actions[:, :, 0] = np.arange(1, chunk + 1)
    return actions


def test_full_chunk_runs_every_sub_action_in_order():
    venv = make([(0, 0), (0, 0)])
    out = venv.chunk_step(ramp(2, 4))
    np.testing.assert_array_equal(out.rewards, [[1, 2, 3, 4]] * 2)
    assert out.executed.all() and not out.dones.any()
    assert out.final_obs is None and out.episodes == []
    np.testing.assert_array_equal(out.obs["states"][:, 0], [4, 4])
    assert out.obs["task_descriptions"] == ["count", "count"]


def test_mid_chunk_termination_stops_remaining_sub_actions_and_auto_resets():
    venv = make([(3, 0), (0, 0)])
    out = venv.chunk_step(ramp(2, 5))
    np.testing.assert_array_equal(out.executed[0], [True, True, True, False, False])
    np.testing.assert_array_equal(out.rewards[0], [1, 2, 3, 0, 0])
    np.testing.assert_array_equal(out.terminations[0], [False, False, True, False, False])
    assert not out.truncations.any()
    np.testing.assert_array_equal(out.dones, [True, False])
    # obs is the new episode's first observation, final_obs the terminal one.
    np.testing.assert_array_equal(out.obs["states"][0], [0, 1, 0])
    np.testing.assert_array_equal(out.final_obs["states"][0], [3, 0, 0])
    assert out.executed[1].all() and out.obs["states"][1, 0] == 5


def test_truncation_is_reported_separately_from_termination():
    venv = make([(0, 2)])
    out = venv.chunk_step(ramp(1, 4))
    np.testing.assert_array_equal(out.truncations[0], [False, True, False, False])
    assert not out.terminations.any()
    assert out.truncated[0] and not out.terminated[0]
    np.testing.assert_array_equal(out.final_obs["states"][0], [2, 0, 0])


def test_episode_statistics():
    venv = make([(3, 0), (0, 0)], success_at=2)
    out = venv.chunk_step(ramp(2, 2))
    assert out.episodes == []
    out = venv.chunk_step(ramp(2, 2))  # env 0 ends on its first sub-step here (t=3)
    assert len(out.episodes) == 1
    ep = out.episodes[0]
    assert (ep.env_index, ep.episode_return, ep.length) == (0, 1 + 2 + 1, 3)
    assert ep.success_once and ep.success_at_end


def test_success_once_differs_from_success_at_end():
    class Flicker(CountingEnv):
        def step(self, action):
            obs, r, te, tr, info = super().step(action)
            return obs, r, te, tr, {"success": self.t == 1}

    venv = ChunkedVectorEnv([partial(Flicker, terminate_at=3)])
    venv.reset()
    ep = venv.chunk_step(ramp(1, 3)).episodes[0]
    assert ep.success_once and not ep.success_at_end


def test_auto_reset_off_keeps_done_env_done_until_reset():
    venv = make([(2, 0), (0, 0)], auto_reset=False)
    out = venv.chunk_step(ramp(2, 3))
    np.testing.assert_array_equal(out.executed[0], [True, True, False])
    np.testing.assert_array_equal(out.obs["states"][0], [2, 0, 0])  # stays terminal, no reset
    out = venv.chunk_step(ramp(2, 3))
    assert not out.executed[0].any() and out.rewards[0].sum() == 0 and not out.dones[0]
    assert out.executed[1].all()
    np.testing.assert_array_equal(venv.finished, [True, False])
    obs = venv.reset()
    np.testing.assert_array_equal(obs["states"][0], [0, 1, 0])
    assert venv.chunk_step(ramp(2, 1)).executed.all()


def test_chunk_of_one_and_done_on_last_sub_step():
    venv = make([(4, 0)])
    out = venv.chunk_step(ramp(1, 4))
    assert out.executed.all() and out.dones[0] and out.terminations[0, -1]
    out = venv.chunk_step(ramp(1, 1))
    assert out.rewards.shape == (1, 1) and out.obs["states"][0, 0] == 1


def test_final_obs_survives_env_buffer_reuse():
    class Reusing(CountingEnv):
        buf = np.zeros(3, dtype=np.float32)

        def _obs(self):
            self.buf[:] = [self.t, self.episode, self.first_seed]
            return {"states": self.buf}

    venv = ChunkedVectorEnv([partial(Reusing, terminate_at=2)])
    venv.reset()
    out = venv.chunk_step(ramp(1, 2))
    np.testing.assert_array_equal(out.final_obs["states"][0], [2, 0, -1])
    np.testing.assert_array_equal(out.obs["states"][0], [0, 1, -1])


def test_slice_and_concat_round_trip():
    venv = make([(2, 0), (0, 0), (1, 0)])
    out = venv.chunk_step(ramp(3, 2))
    parts = [out.slice(0, 1), out.slice(1, 3)]
    assert [e.env_index for e in parts[1].episodes] == [1]
    joined = type(out).concat(parts)
    np.testing.assert_array_equal(joined.rewards, out.rewards)
    np.testing.assert_array_equal(joined.final_obs["states"][[0, 2]], out.final_obs["states"][[0, 2]])
    assert [e.env_index for e in joined.episodes] == [e.env_index for e in out.episodes]
    assert joined.obs["task_descriptions"] == out.obs["task_descriptions"]


@pytest.mark.parametrize(
    "shape, match",
    [((2, 3), r"shape \[2, C, 2\]"), ((3, 1, 2), r"shape \[2, C, 2\]"), ((2, 1, 5), r"shape \[2, C, 2\]"),
     ((2, 0, 2), "chunk length must be >= 1")],
)
def test_wrong_action_shapes_are_rejected(shape, match):
    venv = make([(0, 0), (0, 0)])
    with pytest.raises(ValueError, match=match):
        venv.chunk_step(np.zeros(shape, dtype=np.float32))


def test_nan_actions_are_rejected_with_position():
    venv = make([(0, 0), (0, 0)])
    actions = ramp(2, 3)
    actions[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf .*\[1, 2, 0\]"):
        venv.chunk_step(actions)


def test_step_before_reset_and_empty_env_list_fail_clearly():
    with pytest.raises(ValueError, match="at least one env"):
        ChunkedVectorEnv([])
    venv = ChunkedVectorEnv([CountingEnv])
    with pytest.raises(RuntimeError, match="reset"):
        venv.chunk_step(ramp(1, 1))


def test_envs_built_on_threads_keep_their_order_and_a_failure_closes_the_built_ones():
    import threading
    import time

    from embodied.core.types import EnvError

    threads, closed = set(), []

    class Slow(CountingEnv):
        def __init__(self, index: int, fail: bool = False) -> None:
            time.sleep(0.05 * (3 - index))  # later envs finish first
            threads.add(threading.current_thread().name)
            if fail:
                raise RuntimeError("GL context lost")
            super().__init__()
            self.index = index

        def close(self) -> None:
            closed.append(self.index)

    venv = ChunkedVectorEnv([partial(Slow, i) for i in range(3)], build_threads=3, progress=True)
    assert [env.index for env in venv.envs] == [0, 1, 2]
    assert len(threads) > 1 and all(name.startswith("env-build") for name in threads)
    with pytest.raises(EnvError, match=r"(?s)during construction \(env index 1\).*GL context lost"):
        ChunkedVectorEnv([partial(Slow, 0), partial(Slow, 1, fail=True), partial(Slow, 2)], build_threads=3)
    assert sorted(closed) == [0, 2]


def test_reset_options_reach_each_env():
    seen = []

    class Recording(CountingEnv):
        def reset(self, *, seed=None, options=None):
            seen.append(options)
            return super().reset(seed=seed)

    venv = ChunkedVectorEnv([Recording, Recording])
    venv.reset(seed=0, options=[{"task_id": 1}, None])
    assert seen == [{"task_id": 1}, None]
    with pytest.raises(ValueError, match="1 reset options for 2 envs"):
        venv.reset(seed=0, options=[{}])

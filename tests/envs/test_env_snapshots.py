"""A built-in task pickled mid-episode (an exact restart or resume) goes on exactly as the original, and
unpickling it leaks nothing (MuJoCo's own MjData pickling leaked each unpickled MjData)."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from embodied.backends import process_rss_mib
from embodied.core.registry import ENVS

TASKS = ["Reach-v0", "Push-v0", "PickPlace-v0", "Stack-v0", "PickColor-v0"]


@pytest.mark.parametrize("task", TASKS)
def test_a_task_pickled_mid_episode_goes_on_bit_for_bit(task):
    original = ENVS.resolve(task)(obs_mode="state+rgb", image_size=16, render_mode="rgb_array")
    original.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(9):
        original.step(rng.uniform(-1, 1, 4).astype(np.float32))
    copy = pickle.loads(pickle.dumps(original))
    try:
        assert np.array_equal(original.render(), copy.render())  # positions recomputed for the renderer
        for _ in range(25):
            action = rng.uniform(-1, 1, 4).astype(np.float32)
            (obs_a, *rest_a), (obs_b, *rest_b) = original.step(action), copy.step(action)
            assert rest_a == rest_b  # reward, terminated, truncated, info
            assert all(np.array_equal(obs_a[k], obs_b[k]) for k in obs_a)
    finally:
        original.close()
        copy.close()


def test_unpickling_a_task_leaks_no_memory():
    env = ENVS.resolve("Reach-v0")()
    env.reset(seed=0)
    snapshot = pickle.dumps(env)
    for _ in range(20):  # warm-up
        pickle.loads(snapshot)
    gc.collect()
    before = process_rss_mib()
    for _ in range(300):
        pickle.loads(snapshot)
    gc.collect()
    assert process_rss_mib() - before < 8  # each unpickled MjData leaked ~0.14 MiB: 300 were ~43 MiB
    env.close()

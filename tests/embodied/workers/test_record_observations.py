"""What an off-policy rollout records: the obs each chunk step acted on, and the next one (final_obs after a done)."""

from __future__ import annotations

import numpy as np
import torch

from embodied.types import ChunkStepResult
from embodied.workers.rollout_worker import _observations


def result(states: list[float], dones: list[bool], final: list[float] | None = None) -> ChunkStepResult:
    n = len(states)
    return ChunkStepResult(
        obs={"states": np.array(states, np.float32)[:, None], "main_images": np.full((n, 2, 2, 3), 5, np.uint8),
             "task_descriptions": ["t"] * n},
        rewards=np.zeros((n, 2), np.float32), terminations=np.zeros((n, 2), bool), truncations=np.zeros((n, 2), bool),
        executed=np.ones((n, 2), bool), dones=np.array(dones),
        final_obs=None if final is None else {"states": np.array(final, np.float32)[:, None],
                                              "main_images": np.zeros((n, 2, 2, 3), np.uint8),
                                              "task_descriptions": ["t"] * n})


def test_next_obs_is_final_obs_where_the_episode_ended():
    first = {"states": np.array([[0.0], [1.0]], np.float32), "main_images": np.zeros((2, 2, 2, 3), np.uint8),
             "task_descriptions": ["t", "t"]}
    steps = [result([10.0, 11.0], [False, True], final=[-1.0, -11.0]), result([20.0, 21.0], [False, False])]
    acted, after = _observations(first, steps)
    assert set(acted) == {"states", "main_images"}  # array entries only
    assert acted["states"][..., 0].tolist() == [[0.0, 1.0], [10.0, 11.0]]  # step 1 acts on the reset obs
    assert after["states"][..., 0].tolist() == [[10.0, -11.0], [20.0, 21.0]]  # env 1's terminal obs
    assert after["main_images"].dtype == torch.uint8 and after["main_images"][0, 1].max() == 0
    assert after["main_images"][0, 0].min() == 5

"""What an off-policy rollout records: the obs each chunk step acted on, and the next one (final_obs after a done)."""

from __future__ import annotations

import numpy as np
import torch

from embodied.config import AlgorithmConfig
from embodied.core.types import ChunkStepResult, PolicyOutput
from embodied.workers.rollout_worker import _observations


class Recorder:
    """``AlgorithmConfig``'s default record (the env's array entries), counting the obs it is asked to record."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, bool]] = []  # (rows, whether it acted on them)

    def __call__(self, obs, acted=None):
        self.asked.append((len(obs["task_descriptions"]), acted is not None))
        return AlgorithmConfig().replay_record(None, obs, acted)


class Encoder(Recorder):
    """Records an encoding: the one its act computed (``acted``), else computed here (negated, to tell apart)."""

    def __call__(self, obs, acted=None):
        super().__call__(obs, acted)
        if acted is not None:
            return {"z": acted.forward_inputs["z"]}
        return {"z": -torch.as_tensor(obs["states"])}


def acted(states: np.ndarray) -> PolicyOutput:
    n = len(states)
    return PolicyOutput(actions=torch.zeros(n, 2, 1), logprobs=torch.zeros(n), values=torch.zeros(n),
                        forward_inputs={"z": torch.as_tensor(states) * 10})


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
    results = [result([10.0, 11.0], [False, True], final=[-1.0, -11.0]), result([20.0, 21.0], [False, False])]
    steps = [(None, results[0]), (None, results[1])]
    acted, after = _observations(Recorder(), first, steps, results[1].obs)  # type: ignore[arg-type]
    assert set(acted) == {"states", "main_images"}  # array entries only
    assert acted["states"][..., 0].tolist() == [[0.0, 1.0], [10.0, 11.0]]  # step 1 acts on the reset obs
    assert after["states"][..., 0].tolist() == [[10.0, -11.0], [20.0, 21.0]]  # env 1's terminal obs
    assert after["main_images"].dtype == torch.uint8 and after["main_images"][0, 1].max() == 0
    assert after["main_images"][0, 0].min() == 5


def test_a_policy_records_what_it_computed_when_acting_and_encodes_only_final_and_last_obs():
    first = {"states": np.array([[0.0], [1.0]], np.float32), "main_images": np.zeros((2, 2, 2, 3), np.uint8),
             "task_descriptions": ["t", "t"]}
    results = [result([10.0, 11.0], [False, True], final=[-1.0, -11.0]), result([20.0, 21.0], [False, False])]
    steps = [(acted(first["states"]), results[0]), (acted(results[0].obs["states"]), results[1])]
    policy = Encoder()
    obs, after = _observations(policy, first, steps, results[1].obs)  # type: ignore[arg-type]
    assert obs["z"][..., 0].tolist() == [[0.0, 10.0], [100.0, 110.0]]  # what act computed
    assert after["z"][..., 0].tolist() == [[100.0, 11.0], [-20.0, -21.0]]  # env 1's final obs, then the last obs
    assert sorted(policy.asked) == [(1, False), (2, False), (2, True), (2, True)]  # the final obs: its done row only

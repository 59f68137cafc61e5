"""Which ended episodes a rollout worker values (``Trajectory.final_values``): the truncated ones, and the terminated
ones too when the algorithm bootstraps terminations (PPO's ``bootstrap_at_done: always``), which reaches the
workers from the config. The TD algorithms' ``bootstrap_at_done`` reaches the actor's replay instead."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.core.types import ChunkStepResult
from embodied.workers.rollout_worker import MultiStepRolloutWorker
from tests.embodied.runs.test_offpolicy import RECIPE, TINY, actor, transitions


def ended(terminated: list[bool], truncated: list[bool]) -> ChunkStepResult:
    """Three envs, chunks of 2: env i's episode ends at its last sub-step as told."""
    n = len(terminated)
    term, trunc = np.zeros((n, 2), bool), np.zeros((n, 2), bool)
    term[:, 1], trunc[:, 1] = terminated, truncated
    final = {"states": np.arange(n, dtype=np.float32)[:, None] + 1}
    return ChunkStepResult(obs={"states": np.zeros((n, 1), np.float32)}, rewards=np.zeros((n, 2), np.float32),
                           terminations=term, truncations=trunc, executed=np.ones((n, 2), bool),
                           dones=np.array(terminated) | np.array(truncated), final_obs=final)


@pytest.mark.parametrize("bootstrap_terminations, expected", [(False, [0.0, 20.0, 0.0]), (True, [10.0, 20.0, 0.0])])
def test_terminated_episodes_are_valued_only_when_the_algorithm_bootstraps_them(bootstrap_terminations, expected):
    worker = types.SimpleNamespace(bootstrap_terminations=bootstrap_terminations, policy=types.SimpleNamespace(
        value=lambda obs: torch.as_tensor(obs["states"][:, 0]) * 10))  # V(final_obs) = 10 x the env's number
    values = MultiStepRolloutWorker._final_values(worker, ended([True, False, False], [False, True, False]))
    torch.testing.assert_close(values, torch.tensor(expected))


def test_ppo_says_whether_it_bootstraps_terminations_and_refuses_other_words():
    assert not load_config(None, []).algorithm.bootstraps_terminations()
    assert load_config(None, ["algorithm.bootstrap_at_done=always"]).algorithm.bootstraps_terminations()
    with pytest.raises(ConfigError, match="algorithm.bootstrap_at_done"):
        load_config(None, ["algorithm.bootstrap_at_done=never"])
    assert not load_config(None, ["algorithm.name=grpo", "env.auto_reset=false"]).algorithm.bootstraps_terminations()


@pytest.mark.parametrize("setting, bootstraps", [("truncated", False), ("always", True)])
def test_a_td_algorithms_bootstrap_at_done_reaches_the_actors_replay(setting, bootstraps):
    worker = actor(f"algorithm.bootstrap_at_done={setting}")  # SAC
    epoch = transitions(T=2)
    epoch.dones[0, 1] = epoch.terminated[0, 1] = True  # env 1 terminates in chunk step 0
    worker.update([epoch], 1)
    flags = worker.training.replay.storage["bootstrap"][:6].reshape(2, 3)
    assert bool(flags[0, 1]) is bootstraps
    assert bool(flags[0, 0]) and bool(flags[1].all())  # rows that did not terminate bootstrap either way


def test_a_td_algorithms_bootstrap_at_done_takes_truncated_or_always():
    with pytest.raises(ConfigError, match="algorithm.bootstrap_at_done"):
        load_config(RECIPE, [*TINY, "algorithm.bootstrap_at_done=never"])

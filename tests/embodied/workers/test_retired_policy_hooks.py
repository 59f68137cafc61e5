"""A policy that still defines a method an off-policy run once called is told, once, what decides now
(``embodied.workers.replay_training.RETIRED_POLICY_HOOKS``)."""

from __future__ import annotations

import pytest

from tests.embodied.runs.test_offpolicy import actor


def test_a_policy_that_still_defines_replay_actions_is_told_it_is_no_longer_called(monkeypatch):
    from embodied.algorithms.sac_actor import TanhGaussianActor

    monkeypatch.setattr(TanhGaussianActor, "replay_actions", lambda self, inputs, actions: actions, raising=False)
    with pytest.warns(FutureWarning, match="TanhGaussianActor.replay_actions is no longer called"):
        actor()


def test_a_policy_that_still_defines_replay_observation_is_told_what_decides_now(monkeypatch):
    from embodied.algorithms.sac_actor import TanhGaussianActor

    monkeypatch.setattr(TanhGaussianActor, "replay_observation", lambda self, obs, acted=None: obs, raising=False)
    with pytest.warns(FutureWarning, match=r"TanhGaussianActor.replay_observation is no longer called: .*"
                                           r"AlgorithmConfig.replay_record"):
        actor()

"""The actor worker and its on-policy learner (``OnPolicyLearner``): the worker lends the learner the policy for each
update and keeps the learner's ``state_dict`` beside its own keys in the checkpoint, so that a learner with state of
its own resumes; a learner whose state would overwrite the worker's keys is refused by name."""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from embodied.algorithms.base import LearnerSpec, UpdateContext
from embodied.algorithms.ppo import PPO
from embodied.algorithms.ppo_config import PPOConfig
from embodied.config import ActorConfig
from embodied.core.types import Trajectory
from embodied.policies.mlp.configuration import MLPConfig
from embodied.workers.actor_worker import ActorWorker
from tests.embodied.workers.test_actor_ranks import MLP_SPEC, mlp_obs, rollout


class CountingPPO(PPO):
    """PPO that counts its updates, as state of its own, and keeps the context it was lent."""

    def __init__(self, cfg: PPOConfig, spec: LearnerSpec) -> None:
        super().__init__(cfg, spec)
        self.updates, self.lent = 0, None

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> dict[str, float]:
        self.updates, self.lent = self.updates + 1, ctx
        return super().update(trajectories, iteration, ctx)

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"counting_updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.updates = state.get("counting_updates", self.updates)


class Overwriting(PPO):
    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"version": 0}


@dataclass
class CountingConfig(PPOConfig):
    algorithm_class: ClassVar[str] = "tests.embodied.workers.test_onpolicy_learner:CountingPPO"


@dataclass
class OverwritingConfig(PPOConfig):
    algorithm_class: ClassVar[str] = "tests.embodied.workers.test_onpolicy_learner:Overwriting"


def actor(algorithm: PPOConfig, accumulation: int = 1) -> ActorWorker:
    return ActorWorker(MLPConfig(action_chunk=2, hidden_sizes=[8]), MLP_SPEC, dataclasses.replace(algorithm, lr=1e-3),
                       ActorConfig(grad_accumulation_steps=accumulation), 3, 0)


def test_the_learner_is_lent_the_policy_and_its_state_resumes():
    worker = actor(CountingConfig(update_epochs=1, num_minibatches=1), accumulation=2)
    worker.update([rollout(worker.policy, mlp_obs(2, 1), 2, 1)], 1)
    lent = worker.learner.lent
    assert lent.policy is worker.policy and lent.optimizer is worker.optimizer and lent.ranks is worker.ranks
    assert (lent.version, lent.micro_batches, lent.lr, lent.total_iterations) == (0, 2, 1e-3, 3)
    state = worker.state()
    assert state["counting_updates"] == 1 and "generator" in state and worker.version == 1
    resumed = actor(CountingConfig(update_epochs=1, num_minibatches=1))
    resumed.load_state(state)
    assert resumed.learner.updates == 1 and resumed.version == 1


def test_a_learner_state_that_names_a_key_of_the_worker_is_refused():
    with pytest.raises(ValueError, match=r"the learner's state names keys the actor's own checkpoint entry holds: "
                                         r"\['version'\]"):
        actor(OverwritingConfig()).state()

"""The family's part of the actor worker: what an update trains and what a checkpoint adds to the worker's.

``ActorWorker`` holds what is the policy's whatever the algorithm (its copies on the ranks, weight sync, the weight
average, checkpoint I/O) and one ``Training``, picked by the algorithm's family:

- ``OnPolicyTraining`` (here): an ``OnPolicyLearner`` owns each update over a rollout's trajectories;
- ``ReplayTraining`` (``embodied.workers.replay_training``): a replay buffer, the UTD pacing and an
  ``OffPolicyLearner`` stepped on replay batches.

Neither switches anything of the worker off: the worker asks each for the same few things.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch

from embodied.algorithms.base import LearnerSpec, OnPolicyLearner, UpdateContext, build_learner
from embodied.config import AlgorithmConfig
from embodied.core.timing import Busy
from embodied.core.types import Trajectory
from embodied.policy.base import Policy, PolicyConfig, PolicySpec
from embodied.policy.value_probe import value_only_parameter_names
from embodied.workers.ranks import Ranks

# What the worker keeps in a checkpoint's actor entry; the training's keys sit beside, under their own names.
WORKER_KEYS = frozenset({"policy", "optimizer", "version", "live_policy", "policy_dir", "replay_dir"})


class Training(Protocol):
    """What ``ActorWorker`` asks of its family's part (built by ``new_training`` once the policy is)."""

    learner: Any  # the algorithm's learner
    # Names of the parameters critic warm-up steps alone (the value reaches them, the actions do not); empty
    # without a warm-up.
    value_names: frozenset[str]
    busy: Busy  # seconds per activity of its updates since the worker last took them (embodied.core.timing)
    rebuilds_optimizer: ClassVar[bool]  # the policy's optimizer is rebuilt over a rank's shards when ranks join

    def policy_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The optimizer over the policy's trained ``params``."""

    def join(self, ranks: Ranks, rank: int) -> None:
        """After the policy became one over the ranks: the training's own modules and streams do too."""

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> tuple[dict[str, float], int]:
        """Train on this rank's ``trajectories`` of ``iteration``; the whole batch's metrics and how many weight
        versions it made (on-policy: one; off-policy: its gradient updates)."""

    def checkpoint_keys(self) -> dict[str, Any]:
        """Its entries of the checkpoint's actor entry (the learner's state, counters), beside ``WORKER_KEYS``."""

    def rank_share(self, in_memory: bool) -> dict[str, Any]:
        """This rank's own state (streams; replay when ``in_memory``): ``{}`` where every rank holds the same."""

    def files(self) -> Callable[[Path, list[dict[str, Any]] | None], None] | None:
        """What writes the training's files into a checkpoint's temporary folder, given the ranks' shares
        (None: none to write)."""

    def written(self, folder: Path) -> None:
        """The checkpoint ``folder`` is whole (files it wrote can be reused by the next)."""

    def load(self, state: dict[str, Any], mine: dict[str, Any], shares: int) -> None:
        """Resume from a checkpoint's actor entry (``mine``: this rank's share of it, saved by ``shares`` ranks)."""


class OnPolicyTraining:
    """An ``OnPolicyLearner`` (``algorithm.name``'s) lent the policy for each update (``UpdateContext``)."""

    rebuilds_optimizer: ClassVar[bool] = True  # fsdp: an optimizer over this rank's shards

    def __init__(self, policy: Policy, policy_cfg: PolicyConfig, algorithm: AlgorithmConfig, spec: LearnerSpec) -> None:
        self.learner: OnPolicyLearner = build_learner(algorithm, spec)  # seeded alike on every rank: one order
        self.busy = Busy()
        self.value_names: frozenset[str] = frozenset()
        if algorithm.warmup_iterations() > 0:
            self.value_names = frozenset(value_only_parameter_names(policy, spec.policy))
            if not self.value_names:
                raise ValueError(f"algorithm.critic_warmup_iterations={algorithm.warmup_iterations()}: "
                                 f"policy.type={policy_cfg.type} ({type(policy).__name__}) has no parameter that its "
                                 f"values reach and its actions do not (a value head of its own), so warm-up could "
                                 f"not train the critic alone; set it to 0")
        self.lr = spec.lr

    def policy_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return self.learner.new_optimizer(params, self.lr)  # the learner sets the learning rate of every step

    def join(self, ranks: Ranks, rank: int) -> None:
        """Nothing of its own: the learner computes through ``UpdateContext.ranks``."""

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> tuple[dict[str, float], int]:
        with self.busy("learn"):
            return self.learner.update(trajectories, iteration, ctx), 1

    def checkpoint_keys(self) -> dict[str, Any]:
        state = self.learner.state_dict()
        if state.keys() & WORKER_KEYS:
            raise ValueError(f"the learner's state names keys the actor's own checkpoint entry holds: "
                             f"{sorted(state.keys() & WORKER_KEYS)}")
        return state

    def rank_share(self, in_memory: bool) -> dict[str, Any]:
        return {}  # every rank draws the same minibatch order from the same stream

    def files(self) -> None:
        return None

    def written(self, folder: Path) -> None:
        pass

    def load(self, state: dict[str, Any], mine: dict[str, Any], shares: int) -> None:
        self.learner.load_state_dict({k: state[k] for k in self.checkpoint_keys() if k in state})


def new_training(policy: Policy, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: AlgorithmConfig,
                 learner_spec: LearnerSpec, seed: int) -> Training:
    """The family's part for ``algorithm``: replay and its learner for an off-policy algorithm, else the learner."""
    if algorithm.off_policy:
        from embodied.workers.replay_training import ReplayTraining

        return ReplayTraining(policy, policy_cfg, spec, algorithm, learner_spec, seed)  # type: ignore[arg-type]
    return OnPolicyTraining(policy, policy_cfg, algorithm, learner_spec)

"""Workers: env stepping, policy rollout and the actor's update, each one job."""

from __future__ import annotations

from embodied.workers.actor_worker import ActorWorker
from embodied.workers.env_worker import EnvWorker
from embodied.workers.link import Link
from embodied.workers.rollout_worker import MultiStepRolloutWorker

__all__ = ["ActorWorker", "EnvWorker", "Link", "MultiStepRolloutWorker"]

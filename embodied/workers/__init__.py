"""Workers: env stepping, policy rollout and the actor's update, each one job.

The names below load on first use (PEP 562), so a process that runs only env workers builds its envs and
reports their spec without importing torch or the policies: the env workers of a Ray run are up in about half
the time (3.5 s against 6.4 s for four of them here). On Ray they load torch later all the same, at their first
exchange, because Ray imports an actor's class to unpickle a handle to it (the rollout worker's, for the channel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embodied.core.registry import lazy_attributes

if TYPE_CHECKING:
    from embodied.workers.actor_worker import ActorWorker
    from embodied.workers.env_worker import EnvWorker
    from embodied.workers.link import Link
    from embodied.workers.rollout_worker import MultiStepRolloutWorker

__all__ = ["ActorWorker", "EnvWorker", "Link", "MultiStepRolloutWorker"]
_WHERE = {"ActorWorker": "actor_worker", "EnvWorker": "env_worker", "Link": "link",
          "MultiStepRolloutWorker": "rollout_worker"}

__getattr__ = lazy_attributes(__name__, _WHERE)

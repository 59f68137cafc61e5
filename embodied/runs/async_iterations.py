"""``runner.mode: async``: env and rollout workers keep producing rollouts while the actor trains.

A producer thread in the driver (``embodied.runs.producer``) runs rollout epochs back to back
(``Workers.rollout``, restarts included) and puts each one, with the weight version that produced
it, into a trajectory buffer (a ``LocalChannel``). Iteration ``it`` of the run (``embodied.runs.train.run``,
shared with the sync runner) takes the oldest rollout from the buffer, updates the actor on it (decoupled PPO when the
rollout is older than the actor: ``embodied.algorithms.ppo.ppo_loss``) and publishes the new
weights into each rollout worker's inbox (a channel): a running epoch loads them between chunk
steps, without stopping the envs, and every chunk step records the version it acted with.

Bounded staleness through a capacity gate: the producer starts rollout ``i`` (0-based, counted
from the start of this process) only once the actor has published version ``v0 + i - s``, with
``s = algorithm.staleness_limit()`` (PPO's ``max_staleness``). Rollout ``i`` is trained on by update ``i``, when the actor is at
version ``v0 + i``, so no trajectory is ever more than ``s`` versions old and at most ``s + 1``
rollouts are produced but not yet trained on; a producer that runs ahead waits instead of
dropping work. ``s = 0`` is the sync loop (rollout, update, in turn) to the last bit.

Rollouts in flight when the run stops are counted (``TrainResult.discarded``); a checkpoint
records how many were in flight (``async_in_flight``): a resumed run cannot train on them.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from embodied.config import Config
from embodied.evaluation.stats import episode_metrics
from embodied.runs.producer import EpochProducer, Start
from embodied.workers.group import Workers


class AsyncIterations(EpochProducer):
    """The capacity gate of the producer (``embodied.runs.producer``) and the consumer side (see the module
    docstring)."""

    def __init__(self, workers: Workers, cfg: Config) -> None:
        self.cfg = cfg
        self.staleness = cfg.algorithm.staleness_limit()
        if (os.cpu_count() or 1) < 2:
            warnings.warn("runner.mode=async on a machine with one CPU: env, rollout and actor work cannot overlap, "
                          "so it runs no faster than runner.mode=sync", stacklevel=2)
        elif cfg.cluster.backend == "local":
            warnings.warn("runner.mode=async with cluster.backend=local: the producer and the actor are threads of one "
                          "Python process and take turns on its interpreter lock, so they overlap little (Reach on 2 "
                          "cores: 0.78x sync); cluster.backend=ray runs them in processes of their own (1.40x)",
                          stacklevel=2)
        self.version0 = workers.backend.wait(workers.actor_group.call("weights", True))[0][0]
        self.published: tuple[int, Any] = (self.version0, None)  # (version, weights handle); None: already loaded
        workers.sync_weights()  # version v0 on every rollout worker before the first rollout
        super().__init__(workers, cfg.rollout.chunk_steps, "async")

    def _next(self, index: int) -> Start | None:
        """Rollout ``index`` may start once the actor has published version v0 + index - s, and the run still
        needs it; it loads the newest weights."""
        needed = self.cfg.runner.iterations - self.version0  # rollouts this process trains on, at most
        if index < needed and self.published[0] >= self.version0 + index - self.staleness:
            version, weights = self.published
            return Start(self.version0 + index + 1, weights, version)
        return None

    # -- the consumer (one call per iteration) -------------------------------------------------

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        t0 = time.perf_counter()
        version, trajectories, rollout_time, _ = self.take()
        actor_wait = time.perf_counter() - t0
        depth = self.depth()
        t1 = time.perf_counter()
        metrics = self.workers.update(trajectories, it)
        t2 = time.perf_counter()
        weights = self.workers.backend.wait(self.workers.actor_group.call("weights", False))[0]
        inbox = self.workers.weights_inbox
        for rank in range(len(self.workers.rollout_group)):  # loaded between chunk steps of a running epoch
            inbox.put(f"rollout{rank}", weights)
        with self.cond:
            self.published = (self.version0 + self.consumed, weights)
            self.cond.notify_all()
        steps = sum(t.num_env_steps for t in trajectories)
        metrics |= episode_metrics("env", [e for t in trajectories for e in t.episodes])
        metrics |= {"time/rollout": rollout_time, "time/update": t2 - t1, "env_steps_per_s": steps / rollout_time,
                    "async/actor_wait_s": actor_wait, "async/producer_wait_s": self.waited(),
                    "async/buffer_depth": float(depth), "async/behaviour_version": float(version),
                    "async/versions_per_rollout": float(max(t.num_versions for t in trajectories)),
                    "async/actor_busy": (t2 - t1) / max(time.perf_counter() - t0, 1e-9)}
        return metrics, steps

    # -- checkpoints -----------------------------------------------------------------------------

    def pause(self) -> dict[str, Any]:
        """The producer at rest (``EpochProducer.pause``); rollouts in the buffer stay (this run trains on
        them), and the checkpoint records how many (a resumed run cannot)."""
        return {"async_in_flight": super().pause()}

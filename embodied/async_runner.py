"""``runner.mode: async``: env and rollout workers keep producing rollouts while the actor trains.

A producer thread in the driver runs rollout epochs back to back (``Workers.rollout``, restarts
included) and puts each one, with the weight version that produced it, into a trajectory buffer
(a ``LocalChannel``). Iteration ``it`` of the run (``embodied.runner.run``, shared with the sync
runner) takes the oldest rollout from the buffer, updates the actor on it (decoupled PPO when the
rollout is older than the actor: ``embodied.algorithms.ppo.ppo_loss``) and publishes the new
weights into each rollout worker's inbox (a channel): a running epoch loads them between chunk
steps, without stopping the envs, and every chunk step records the version it acted with.

Bounded staleness through a capacity gate: the producer starts rollout ``i`` (0-based, counted
from the start of this process) only once the actor has published version ``v0 + i - s``, with
``s = algorithm.max_staleness``. Rollout ``i`` is trained on by update ``i``, when the actor is at
version ``v0 + i``, so no trajectory is ever more than ``s`` versions old and at most ``s + 1``
rollouts are produced but not yet trained on; a producer that runs ahead waits instead of
dropping work. ``s = 0`` is the sync loop (rollout, update, in turn) to the last bit.

Rollouts in flight when the run stops are counted (``TrainResult.discarded``); a checkpoint
records how many were in flight (``async_in_flight``): a resumed run cannot train on them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from typing import Any

from embodied.channels import LocalChannel
from embodied.config import Config
from embodied.evaluation import episode_metrics
from embodied.workers.group import Workers

_KEY = "rollouts"


class AsyncIterations:
    """The producer thread and the consumer side of the trajectory buffer (see the module docstring)."""

    def __init__(self, workers: Workers, cfg: Config) -> None:
        self.workers, self.cfg = workers, cfg
        self.staleness = cfg.algorithm.max_staleness
        if (os.cpu_count() or 1) < 2:
            warnings.warn("runner.mode=async on a machine with one CPU: env, rollout and actor work cannot overlap, "
                          "so it runs no faster than runner.mode=sync", stacklevel=2)
        elif cfg.cluster.backend == "local":
            warnings.warn("runner.mode=async with cluster.backend=local: the producer and the actor are threads of one "
                          "Python process and take turns on its interpreter lock, so they overlap little (Reach on 2 "
                          "cores: 0.78x sync); cluster.backend=ray runs them in processes of their own (1.40x)",
                          stacklevel=2)
        self.buffer = LocalChannel("trajectory buffer")
        self.version0 = workers.backend.wait(workers.actor_group.call("weights", True))[0][0]
        self.published: tuple[int, Any] = (self.version0, None)  # (version, weights handle); None: already loaded
        self.produced = self.consumed = 0
        self.producing = False  # a rollout epoch is running
        self.paused = self.stopping = False
        self.error: BaseException | None = None
        self.producer_wait = 0.0  # seconds the producer waited at the gate since the last iteration
        self.cond = threading.Condition()
        workers.sync_weights()  # version v0 on every rollout worker before the first rollout
        self.thread = threading.Thread(target=self._produce, name="AsyncProducer", daemon=True)
        self.thread.start()

    # -- the producer --------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            while True:
                t0 = time.perf_counter()
                with self.cond:
                    self.cond.wait_for(lambda: self.stopping or (not self.paused and self._gate_open()))
                    if self.stopping:
                        return
                    self.producer_wait += time.perf_counter() - t0
                    version, weights = self.published
                    self.producing = True
                if weights is not None:  # the newest weights; an eval may have sent them already
                    self.workers.backend.wait(self.workers.rollout_group.call("sync_weights", weights, True))
                t1 = time.perf_counter()
                trajectories = self.workers.rollout(self.cfg.rollout.chunk_steps, self.version0 + self.produced + 1)
                self.buffer.put(_KEY, (version, trajectories, time.perf_counter() - t1))
                with self.cond:
                    self.produced += 1
                    self.producing = False
                    self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            with self.cond:
                self.error, self.producing = exc, False
                self.cond.notify_all()

    def _gate_open(self) -> bool:
        """Rollout ``produced`` may start: the actor has published version v0 + produced - s, and
        the run still needs it."""
        needed = self.cfg.runner.iterations - self.version0  # rollouts this process trains on, at most
        return self.produced < needed and self.published[0] >= self.version0 + self.produced - self.staleness

    # -- the consumer (one call per iteration) -------------------------------------------------

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        t0 = time.perf_counter()
        version, trajectories, rollout_time = self._take()
        actor_wait = time.perf_counter() - t0
        depth = self.buffer.qsize(_KEY)
        t1 = time.perf_counter()
        metrics = self.workers.update(trajectories, it)
        t2 = time.perf_counter()
        weights = self.workers.backend.wait(self.workers.actor_group.call("weights", False))[0]
        inbox = self.workers.weights_inbox
        for rank in range(len(self.workers.rollout_group)):  # loaded between chunk steps of a running epoch
            inbox.put(f"rollout{rank}", weights)
        with self.cond:
            self.consumed += 1
            self.published = (self.version0 + self.consumed, weights)
            producer_wait, self.producer_wait = self.producer_wait, 0.0
            self.cond.notify_all()
        steps = sum(t.num_env_steps for t in trajectories)
        metrics |= episode_metrics("env", [e for t in trajectories for e in t.episodes])
        metrics |= {"time/rollout": rollout_time, "time/update": t2 - t1, "env_steps_per_s": steps / rollout_time,
                    "async/actor_wait_s": actor_wait, "async/producer_wait_s": producer_wait,
                    "async/buffer_depth": float(depth), "async/behaviour_version": float(version),
                    "async/versions_per_rollout": float(max(t.num_versions for t in trajectories)),
                    "async/actor_busy": (t2 - t1) / max(time.perf_counter() - t0, 1e-9)}
        return metrics, steps

    def _take(self) -> tuple[int, list, float]:
        """The oldest rollout; raises the producer's error instead of waiting for a rollout that never comes."""
        while True:
            with self.cond:
                if self.error is not None and self.buffer.qsize(_KEY) == 0:
                    raise self.error
            try:
                return self.buffer.get(_KEY, timeout=0.2)
            except TimeoutError:
                continue

    # -- checkpoints and the end -----------------------------------------------------------------

    def pause(self) -> dict[str, Any]:
        """Wait for the running rollout epoch to end and start no other: the envs are then at rest and
        match what the checkpoint saves. Rollouts in the buffer stay (this run trains on them)."""
        with self.cond:
            self.paused = True
            self.cond.wait_for(lambda: not self.producing)
            return {"async_in_flight": self.buffer.qsize(_KEY)}

    def resume(self) -> None:
        with self.cond:
            self.paused = False
            self.cond.notify_all()

    def close(self) -> int:
        """Stop the producer (after its running epoch); returns the rollouts never trained on."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join()
        discarded = self.produced - self.consumed
        if discarded:
            print(f"async: {discarded} rollout(s) in flight at the end were not trained on "
                  f"({self.produced} produced, {self.consumed} trained on)", file=sys.stderr, flush=True)
        return discarded

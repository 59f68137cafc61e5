"""``EpochProducer``: a thread in the driver that runs rollout epochs while the actor trains.

Shared by the runners whose rollouts overlap the actor's updates: async PPO (``embodied.runs.async_iterations``)
and off-policy SAC (``embodied.runs.offpolicy_iterations``). What differs between them is one question, asked
under ``cond`` before each rollout: may rollout ``i`` (0-based, counted from the start of this process)
start now, and with which weights (``_next``)? The thread then loads those weights into every rollout
worker, runs the epoch (``Workers.rollout``, restarts included) and puts it (an ``Epoch``: the weight version,
the summaries, the seconds it ran and the seconds the weights took to load) into a trajectory buffer (a
``LocalChannel``) that the consumer, the runner's iteration, reads in order (``take``). An error of the
producer is raised there, by the consumer, instead of a rollout that never comes.

    class Mine(EpochProducer):
        def _next(self, i):          # under self.cond
            return Start(iteration=first + i, weights=handle) if allowed else None
    producer = Mine(workers, chunk_steps, "mine")
    epoch = producer.take()          # epoch.version, epoch.rollout, epoch.seconds, epoch.sync_seconds
    producer.pause(); ...; producer.resume(); producer.close()
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from embodied.channels import LocalChannel
from embodied.core.types import RolloutSummary
from embodied.workers.group import Workers

_KEY = "rollouts"


@dataclass
class Start:
    """What the consumer lets rollout ``i`` start with."""

    iteration: int  # the iteration that will train on it (labels faults and restarts)
    weights: Any  # a weights handle every rollout worker loads first; None: they hold them already
    version: int | None = None  # the weight version it acts with (None: the oldest its summaries report)


class Epoch(NamedTuple):
    """One rollout epoch as the consumer takes it."""

    version: int  # the weight version it acted with
    rollout: list[RolloutSummary]  # every rollout worker's summary (its trajectory stays in the worker)
    seconds: float  # the epoch itself
    sync_seconds: float  # the rollout workers loading new weights before it (0: they held them already)


class EpochProducer:
    """The producer thread, the trajectory buffer and pause/resume/close; subclasses say when and with what
    weights each rollout starts (``_next``) and consume with ``take``."""

    def __init__(self, workers: Workers, chunk_steps: int, name: str) -> None:
        self.workers, self.chunk_steps, self.name = workers, chunk_steps, name
        self.buffer = LocalChannel("trajectory buffer")
        self.produced = self.consumed = 0
        self.producing = False  # a rollout epoch is running
        self.paused = self.stopping = False
        self.error: BaseException | None = None
        self.producer_wait = 0.0  # seconds the producer waited for its next start since the last ``waited``
        self.waiting_since: float | None = None  # when the producer's current wait for a start began (None: busy)
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._produce, name=f"{name}-producer", daemon=True)
        self.thread.start()

    def _next(self, index: int) -> Start | None:
        """Whether rollout ``index`` may start now (None: not yet) and with what; called with ``cond`` held."""
        raise NotImplementedError

    # -- the producer --------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            while True:
                start: Start | None = None
                with self.cond:
                    self.waiting_since = time.perf_counter()
                    while not self.stopping and (self.paused or (start := self._next(self.produced)) is None):
                        self.cond.wait()
                    if self.stopping:
                        return
                    assert start is not None
                    self.producer_wait += time.perf_counter() - self.waiting_since
                    self.waiting_since, self.producing = None, True
                t1 = time.perf_counter()
                if start.weights is not None:  # skip_older: an eval may have sent these (or newer) already
                    self.workers.backend.wait(self.workers.rollout_group.call("sync_weights", start.weights, True))
                t2 = time.perf_counter()
                rollout = self.workers.rollout(self.chunk_steps, start.iteration)
                version = start.version if start.version is not None else min(r.version for r in rollout)
                self.buffer.put(_KEY, Epoch(version, rollout, time.perf_counter() - t2, t2 - t1))
                with self.cond:
                    self.produced += 1
                    self.producing = False
                    self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            with self.cond:
                self.error, self.producing = exc, False
                self.cond.notify_all()

    # -- the consumer --------------------------------------------------------------------------

    def take(self) -> Epoch:
        """The oldest rollout epoch; raises the producer's error instead of waiting for a rollout that never
        comes."""
        while True:
            with self.cond:
                if self.error is not None and self.buffer.qsize(_KEY) == 0:
                    raise self.error
            try:
                item = self.buffer.get(_KEY, timeout=0.2)
            except TimeoutError:
                continue
            with self.cond:
                self.consumed += 1
            return item

    def wait_produced(self, count: int) -> None:
        """Wait until ``count`` rollouts are done or the producer failed (its error is raised by ``take``)."""
        with self.cond:
            self.cond.wait_for(lambda: self.produced >= count or self.error is not None)

    def waited(self) -> float:
        """Seconds the producer waited for a start since the last call (a wait still going on counted up to now,
        the rest of it at the next call)."""
        with self.cond:
            wait, self.producer_wait = self.producer_wait, 0.0
            if self.waiting_since is not None:
                now = time.perf_counter()
                wait, self.waiting_since = wait + now - self.waiting_since, now
            return wait

    def depth(self) -> int:
        """Rollouts produced and not yet taken."""
        return self.buffer.qsize(_KEY)

    # -- checkpoints and the end -----------------------------------------------------------------

    def pause(self) -> int:
        """Wait for the running rollout epoch to end and start no other: the envs are then at rest and match
        what the checkpoint saves. Returns the rollouts produced and not yet taken (they stay in the buffer)."""
        with self.cond:
            self.paused = True
            self.cond.wait_for(lambda: not self.producing)
            return self.buffer.qsize(_KEY)

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
            print(f"{self.name}: {discarded} rollout(s) in flight at the end were not trained on "
                  f"({self.produced} produced, {self.consumed} trained on)", file=sys.stderr, flush=True)
        return discarded

"""The off-policy training loop (an algorithm whose config is an ``OffPolicyConfig``): rollout epochs feed replay in
the actor, and, with
``algorithm.overlap`` (the default), the next epoch runs while the actor makes this one's updates.

One iteration ``it`` of the run (``embodied.runs.train.run``, shared with the PPO runners: eval, logging and
checkpoints are the same) takes rollout epoch ``it`` from the producer thread (``embodied.runs.producer``,
shared with async PPO) and has the actor add its chunk transitions to replay and make ``algorithm.utd_ratio``
gradient updates per transition received (``embodied.workers.replay_training``). Before each epoch starts, the rollout
workers get the actor's weights if it has made ``algorithm.sync_every`` gradient updates since they last got
them, else they act with the ones they hold.

With ``algorithm.overlap`` the iteration lets epoch ``it + 1`` start *before* the updates of epoch ``it``,
with the weights the actor has then, and waits for that epoch to end before it returns:

    rollouts:  | epoch 1 | epoch 2  | epoch 3  | ...        epoch it + 1 acts with the weights from before
    actor:               | update 1 | update 2 | ...        update it, so its data is one epoch's updates stale

The rollout workers wait for the actor only when an update outlasts an epoch, and the actor for data only
when an epoch outlasts an update. Who waits for whom is logged in seconds, overlapped or in turn:
``time/actor_wait`` (the actor waiting for an epoch's data), ``time/rollout_wait`` (the rollout workers idle
between epochs, waiting to be let start the next) and ``time/sync`` (the rollout workers loading new weights
before the epoch), beside ``time/rollout`` and ``time/update``. In turn the actor waits through every sync and
epoch, and the rollouts through every update; ``embodied bench``'s off-policy row reports both waits as shares of the
loop's time (``embodied.bench.sac``).
Between iterations nothing runs, so evals, logging and checkpoints see the workers at rest, in the same order
in every run of a config.

The schedule is fixed by the config, so a run repeats itself bit for bit. Exact resume: an iteration that ends
in a scheduled checkpoint (``runner.checkpoint_every``, the last) starts no next epoch; the epoch after the
checkpoint starts from a fresh weight sync, which a run resumed from that checkpoint does too, so it ends on the
weights of the run in one go. A checkpoint the schedule did not foresee (a stop signal, a full disk) finds the
next epoch already run: it is recorded (``rollouts_in_flight``), never trained on, and a run resumed from there
goes on but not bit-exactly. Without overlap (rollout and updates in turn) every checkpoint resumes exactly.
"""

from __future__ import annotations

import time
from typing import Any

from embodied.config import Config, OffPolicyConfig
from embodied.evaluation.stats import episode_metrics
from embodied.runs.producer import EpochProducer, Start
from embodied.workers.group import Workers

LOOP_PREFIX = "offpolicy"  # the off-policy loop's metrics (updates, synced, overlap...), whatever the learner


class OffPolicyIterations(EpochProducer):
    """Rollout epochs, replay and UTD-paced updates: overlapped or in turn (``algorithm.overlap``); weights synced
    every ``algorithm.sync_every`` updates."""

    def __init__(self, workers: Workers, cfg: Config) -> None:
        assert isinstance(cfg.algorithm, OffPolicyConfig)
        self.cfg, self.algo = cfg, cfg.algorithm
        # The loop's own metrics are the engine's (``offpolicy/updates``: the gradient updates of an iteration); the
        # learner's losses carry its name.
        self.prefix = LOOP_PREFIX
        self.since_sync: int | None = None  # gradient updates since the weights were last sent (None: send now)
        self.scheduled: dict[int, Start] = {}  # rollouts let start, not yet started (by index)
        self.started = 0  # rollouts let start in this process
        super().__init__(workers, cfg.rollout.chunk_steps, "off-policy")

    def _next(self, index: int) -> Start | None:
        return self.scheduled.pop(index, None)

    def _let_start(self, it: int) -> bool:
        """Let the next rollout start (for iteration ``it``), with new weights if ``sync_every`` updates were made
        since the last sync; returns whether they were sent."""
        sync = self.since_sync is None or self.since_sync >= self.algo.sync_every
        weights = None
        if sync:  # a handle (Ray ships the weights once, by reference); colocated: (version, None)
            weights = self.workers.actor_group.call("weights", self.workers.colocated)[0]
            self.since_sync = 0
        with self.cond:
            self.scheduled[self.started] = Start(it, weights)
            self.started += 1
            self.cond.notify_all()
        return sync

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        t0 = time.perf_counter()
        synced = self._let_start(it) if self.started == self.consumed else False  # in turn, or after a checkpoint
        epoch = self.take()
        t1 = time.perf_counter()
        runner = self.cfg.runner
        ahead = self.algo.overlap and it < runner.iterations and not runner.checkpoints_at(it)
        if ahead:  # epoch it + 1 runs during this update, with the weights from before it
            synced = self._let_start(it + 1) or synced
        metrics = self.workers.update(epoch.rollout, it)
        t2 = time.perf_counter()
        updates = metrics[f"{self.prefix}/updates"]
        self.since_sync = (self.since_sync or 0) + int(updates)
        if ahead:
            self.wait_produced(self.started)  # at rest between iterations (its failure is raised by the next take)
        t3 = time.perf_counter()
        steps = sum(r.num_env_steps for r in epoch.rollout)
        metrics |= episode_metrics("env", [e for r in epoch.rollout for e in r.episodes])
        metrics |= {"time/rollout": epoch.seconds, "time/update": t2 - t1, "time/sync": epoch.sync_seconds,
                    "time/actor_wait": (t1 - t0) + (t3 - t2), "time/rollout_wait": self.waited(),
                    "env_steps_per_s": steps / epoch.seconds}
        loop = {"synced": float(synced), "updates_since_sync": float(self.since_sync),
                "behaviour_version": float(epoch.version), "overlap": float(ahead),
                "updates_per_s": updates / max(t2 - t1, 1e-9)}
        metrics |= {f"{self.prefix}/{key}": value for key, value in loop.items()}
        return metrics, steps

    def pause(self) -> dict[str, Any]:
        """The producer at rest; an epoch that already ran for the next iteration (a checkpoint the schedule did
        not foresee) is recorded, and the epoch after the checkpoint starts from a fresh sync."""
        in_flight = super().pause()
        return {"rollouts_in_flight": in_flight} if in_flight else {}

    def resume(self) -> None:
        self.since_sync = None  # as a run resumed from this checkpoint does: its first epoch gets the newest weights
        super().resume()

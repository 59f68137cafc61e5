"""The off-policy training loop (``algorithm.name: sac``): rollout epochs feed replay in the actor.

One iteration of the run (``embodied.runner.run``, shared with the PPO runners: eval, logging and
checkpoints are the same) is: sync weights if the actor has made ``algorithm.sync_every`` gradient updates
since the rollout workers last got them · one rollout epoch of ``rollout.chunk_steps`` chunk steps with the
policy's stochastic (tanh-Gaussian) action · the actor adds the epoch's chunk transitions to replay and makes
``algorithm.utd_ratio`` gradient updates per transition received (``OffPolicyActorWorker``).

Here the rollout and the updates take turns; with colocated placement the rollout workers act with the
actor's own module, so they always hold the newest weights and ``sync_every`` changes nothing.
"""

from __future__ import annotations

import time
from typing import Any

from embodied.config import Config
from embodied.evaluation import episode_metrics
from embodied.workers.group import Workers


class OffPolicyIterations:
    """Rollout epoch, replay and UTD-paced updates, in turn; weight syncs every ``sync_every`` updates."""

    def __init__(self, workers: Workers, cfg: Config) -> None:
        self.workers, self.cfg = workers, cfg
        self.since_sync: int | None = None  # gradient updates since the last sync (None: never synced)

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        t0 = time.perf_counter()
        synced = self.since_sync is None or self.since_sync >= self.cfg.algorithm.sync_every
        if synced:
            self.workers.sync_weights()
            self.since_sync = 0
        rollout = self.workers.rollout(self.cfg.rollout.chunk_steps, it)
        t1 = time.perf_counter()
        metrics = self.workers.update(rollout, it)
        t2 = time.perf_counter()
        self.since_sync = (self.since_sync or 0) + int(metrics["sac/updates"])
        steps = sum(r.num_env_steps for r in rollout)
        metrics |= episode_metrics("env", [e for r in rollout for e in r.episodes])
        metrics |= {"time/rollout": t1 - t0, "time/update": t2 - t1, "env_steps_per_s": steps / (t1 - t0),
                    "sac/synced": float(synced), "sac/updates_per_s": metrics["sac/updates"] / max(t2 - t1, 1e-9)}
        return metrics, steps

    def pause(self) -> dict[str, Any]:
        return {}

    def resume(self) -> None:
        pass

    def close(self) -> int:
        return 0

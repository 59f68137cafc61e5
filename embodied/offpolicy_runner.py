"""The off-policy training loop (``algorithm.name: sac``): rollout epochs feed replay in the actor.

One iteration of the run (``embodied.runner.run``, shared with the PPO runners: eval, logging and
checkpoints are the same) is: sync weights if the actor has made ``algorithm.sync_every`` gradient updates
since the rollout workers last got them · one rollout epoch of ``rollout.chunk_steps`` chunk steps with the
policy's stochastic (tanh-Gaussian) action · the actor adds the epoch's chunk transitions to replay and makes
``algorithm.utd_ratio`` gradient updates per transition received (``OffPolicyActorWorker``).

Here the rollout and the updates take turns, so the actor waits for data while the rollout runs and the
rollouts wait for weights while the actor updates and syncs (logged: ``time/rollout``, ``time/update``,
``time/sync`` and the shares ``sac/actor_waits_for_data``, ``sac/rollouts_wait_for_weights``). With colocated
placement the rollout workers act with the actor's own module, so they always hold the newest weights and
``sync_every`` changes nothing.
"""

from __future__ import annotations

import time
from typing import Any

from embodied.config import Config
from embodied.evaluation import episode_metrics
from embodied.workers.group import Workers


def wait_shares(rollout_s: float, update_s: float, sync_s: float) -> dict[str, float]:
    """Who waits for whom while rollouts and updates take turns: the actor waits for data while the rollout runs
    (``sac/actor_waits_for_data``), the rollouts wait for weights while the actor updates and syncs
    (``sac/rollouts_wait_for_weights``); shares of the iteration's time, summing to 1."""
    total = max(rollout_s + update_s + sync_s, 1e-12)
    return {"sac/actor_waits_for_data": rollout_s / total, "sac/rollouts_wait_for_weights": (update_s + sync_s) / total}


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
        t1 = time.perf_counter()
        rollout = self.workers.rollout(self.cfg.rollout.chunk_steps, it)
        t2 = time.perf_counter()
        metrics = self.workers.update(rollout, it)
        t3 = time.perf_counter()
        self.since_sync = (self.since_sync or 0) + int(metrics["sac/updates"])
        steps = sum(r.num_env_steps for r in rollout)
        metrics |= episode_metrics("env", [e for r in rollout for e in r.episodes])
        metrics |= {"time/sync": t1 - t0, "time/rollout": t2 - t1, "time/update": t3 - t2,
                    "env_steps_per_s": steps / (t2 - t1), "sac/synced": float(synced),
                    "sac/updates_per_s": metrics["sac/updates"] / max(t3 - t2, 1e-9)}
        return metrics | wait_shares(metrics["time/rollout"], metrics["time/update"], metrics["time/sync"]), steps

    def pause(self) -> dict[str, Any]:
        return {}

    def resume(self) -> None:
        pass

    def close(self) -> int:
        return 0

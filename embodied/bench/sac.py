"""``embodied bench``'s SAC row: gradient updates per second, and who waits for whom in the off-policy loop.

Both on ``configs/reach_mlp_sac.yaml`` (the Reach MLP, 256x256 policy and critics) with RLPD's critics: an
ensemble of ``CRITICS`` with LayerNorm, the TD target's min over 2 of them, batches of ``BATCH``.

- **updates/s**: ``SACLearner.step`` on batches sampled from a filled replay (random transitions of the env's
  shapes), timed after two warm-up steps; sampling is timed too, as the actor does it per update.
- **waits**: the recipe run through ``OffPolicyIterations`` (local backend), with its ``algorithm.overlap``
  (the next epoch during the updates) unless told otherwise; the first iteration is a warm-up, the rest are
  timed and summed from the loop's own ``time/rollout``, ``time/update``, ``time/sync``, ``time/actor_wait``
  (the actor waiting for data) and ``time/rollout_wait`` (the rollouts waiting to be let start, with the weights
  of the updates before), the two waits also as shares of the timed iterations' wall time (``wait_shares``). In
  turn the two shares sum to about 1; overlapped, what both leave is the time rollouts and updates ran together.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SAC_RECIPE = ROOT / "configs" / "reach_mlp_sac.yaml"
CRITICS = 10
BATCH = 256
CRITIC_OVERRIDES = [f"algorithm.num_critics={CRITICS}", "algorithm.critic_subset=2", "algorithm.critic_layernorm=true",
                    f"algorithm.batch_size={BATCH}"]


def sac_row(updates: int, iterations: int, num_envs: int, chunk_steps: int, overlap: bool = True) -> dict[str, Any]:
    """The bench row: ``updates`` timed learner steps, then ``iterations`` timed loop iterations of
    ``num_envs`` envs x ``chunk_steps`` chunk steps (after one warm-up iteration), overlapped or in turn."""
    from embodied.config import load_config

    overrides = [*CRITIC_OVERRIDES, f"env.num_envs={num_envs}", f"rollout.chunk_steps={chunk_steps}",
                 "eval_env.num_envs=1", "env.preflight=false", "logger.backends=[console]",
                 f"algorithm.learning_starts={num_envs * chunk_steps}", f"algorithm.overlap={str(overlap).lower()}",
                 # every timed iteration is a middle one: a checkpoint or the run's end would start no next epoch
                 f"runner.iterations={iterations + 2}", "runner.checkpoint_every=0"]
    cfg = load_config(SAC_RECIPE, overrides)
    rate = update_rate(cfg, updates)
    waits = loop_waits(cfg, iterations)
    a, policy = cfg.algorithm, cfg.algorithm.worker_policy(cfg.policy)  # the tanh-Gaussian MLP SAC trains
    return {"policy": f"{policy.type} {cfg.env.id} {'x'.join(map(str, cfg.policy.hidden_sizes))}",
            "critics": a.num_critics, "layernorm": a.critic_layernorm, "batch_size": a.batch_size,
            "updates_timed": updates, "updates_per_s": round(rate, 2), "num_envs": num_envs,
            "chunk_steps": chunk_steps, "utd_ratio": a.utd_ratio, "overlap": a.overlap, "iterations_timed": iterations,
            **waits}


def update_rate(cfg: Any, updates: int) -> float:
    """Gradient updates per second of the off-policy actor's sample-and-step, on a replay of random rows."""
    import torch

    from embodied.env_runtime.factory import env_spec
    from embodied.workers.actor_worker import ActorWorker

    spec = env_spec(cfg.env)
    worker = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), spec, cfg.algorithm, cfg.actor,
                         cfg.runner.iterations, cfg.experiment.seed).training
    rows, chunk = 8 * cfg.algorithm.batch_size, cfg.policy.action_chunk
    g = torch.Generator().manual_seed(0)
    states = torch.randn(rows, spec.state_dim, generator=g)
    worker.replay.add_transitions({"states": states}, torch.rand(rows, chunk, spec.action_dim, generator=g) * 2 - 1,
                                  torch.randn(rows, generator=g), torch.full((rows,), 0.99 ** chunk),
                                  torch.ones(rows, dtype=torch.bool), {"states": states.roll(1, 0)})
    for _ in range(2):  # warm-up: allocator, autograd graph caches
        worker.learner.update(worker.sample())
    t0 = time.perf_counter()
    for _ in range(updates):
        worker.learner.update(worker.sample())
    return updates / (time.perf_counter() - t0)


def wait_shares(actor_wait_s: float, rollout_wait_s: float, wall_s: float) -> dict[str, float]:
    """The loop's ``time/actor_wait`` and ``time/rollout_wait`` as shares of its wall time: the actor waiting
    for data, the rollouts waiting for weights (to be let start the next epoch)."""
    wall = max(wall_s, 1e-12)
    return {"actor_waits_for_data": actor_wait_s / wall, "rollouts_wait_for_weights": rollout_wait_s / wall}


def loop_waits(cfg: Any, iterations: int) -> dict[str, float]:
    """Seconds of rollout, update, sync and both waits over ``iterations`` timed iterations, and the wait shares."""
    from embodied.runs.offpolicy_iterations import OffPolicyIterations
    from embodied.backends import make_backend
    from embodied.workers.group import Workers

    backend = make_backend(cfg.cluster)
    try:
        workers = Workers.start(cfg, backend)
        try:
            loop = OffPolicyIterations(workers, cfg)
            try:
                loop(1)  # warm-up
                t0 = time.perf_counter()
                timed = [loop(it)[0] for it in range(2, iterations + 2)]
                wall = time.perf_counter() - t0
            finally:
                loop.close()  # the epoch started for the next iteration is never trained on
        finally:
            workers.close()
    finally:
        backend.shutdown()
    seconds = {k: sum(m[f"time/{k}"] for m in timed) for k in ("rollout", "update", "sync", "actor_wait",
                                                                 "rollout_wait")}
    shares = wait_shares(seconds["actor_wait"], seconds["rollout_wait"], wall)
    return {"rollout_s": round(seconds["rollout"], 3), "update_s": round(seconds["update"], 3),
            "sync_s": round(seconds["sync"], 4), "actor_wait_s": round(seconds["actor_wait"], 3),
            "rollout_wait_s": round(seconds["rollout_wait"], 3), "loop_s": round(wall, 3),
            "updates_in_loop": int(sum(m[f"{loop.prefix}/updates"] for m in timed)),
            **{k: round(v, 3) for k, v in shares.items()}}

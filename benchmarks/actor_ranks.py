"""Actor ranks: the update time per iteration and the weight-sync time with 1 and N data-parallel ranks.

    .venv/bin/python -m benchmarks.actor_ranks                         # tiny VLA, 1 and 2 ranks, ddp and fsdp
    .venv/bin/python -m benchmarks.actor_ranks --policy mlp --ranks 1,2,4
    .venv/bin/python -m benchmarks.actor_ranks --quick                 # one repeat, small batch: a smoke run

One rollout batch (``--envs`` envs x ``--steps`` chunk steps, acted by the initial policy) is trained on
by one rank (an ``ActorWorker`` on a Ray actor, like every rank) and by N ranks of one gloo process group
(``embodied.workers.launch.start_actor_group``, rollout rank r's share on actor rank r mod N), with the same
PPO settings. "update" is the median wall-clock of ``update`` (all ranks, as the runner waits for them);
"sync" the median of ``weights`` (rank 0's trainable state gathered, as a weight sync asks for it). Each
rank runs one torch thread; on a machine with fewer cores than ranks, N ranks cannot be faster than one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from embodied.algorithms.ppo_config import PPOConfig
from embodied.config import ActorConfig, Config
from embodied.config.schema import ClusterConfig
from embodied.core.types import Trajectory
from embodied.policy.base import PolicyConfig, PolicySpec


def policy_case(name: str) -> tuple[PolicyConfig, PolicySpec, Any]:
    """A policy config, its spec and an observation maker ``obs(n, seed)``."""
    import numpy as np

    if name == "mlp":
        from embodied.policies.mlp.configuration import MLPConfig

        spec = PolicySpec(state_dim=32, image_shape=None, action_dim=7, action_low=(-1.0,) * 7,
                          action_high=(1.0,) * 7)
        return MLPConfig(action_chunk=4), spec, lambda n, seed: {
            "states": np.random.default_rng(seed).normal(size=(n, 32)).astype(np.float32)}
    from embodied.policies.vla.configuration import VLAConfig

    spec = PolicySpec(state_dim=0, image_shape=(64, 64, 3), action_dim=4, action_low=(-1.0,) * 4,
                      action_high=(1.0,) * 4, wrist_image_shape=None)

    def obs(n: int, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {"main_images": rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8),
                "task_descriptions": ["pick up the red cube"] * n}

    return VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=4, action_head=name.removeprefix("vla-")
                     if name.startswith("vla-") else "tokens"), spec, obs


def rollout(policy_cfg: PolicyConfig, spec: PolicySpec, obs: Any, envs: int, steps: int, parts: int) -> list[Trajectory]:
    """``parts`` rollout ranks' trajectories of ``envs / parts`` envs each, acted by the initial policy."""
    from embodied.workers.actor_worker import ActorWorker

    policy = ActorWorker(policy_cfg, spec, PPOConfig(), ActorConfig(), 1, 0).policy
    out = []
    for part in range(parts):
        with torch.no_grad():
            acts = [policy.act(obs(envs // parts, 100 * part + t)) for t in range(steps)]
        n, chunk = acts[0].actions.shape[:2]
        stack = lambda key: torch.stack([getattr(o, key) for o in acts])  # noqa: E731
        zeros = torch.zeros(steps, n, dtype=torch.bool)
        out.append(Trajectory(
            forward_inputs={k: torch.stack([o.forward_inputs[k] for o in acts]) for k in acts[0].forward_inputs},
            actions=stack("actions"), logprobs=stack("logprobs"), values=stack("values"),
            rewards=torch.randn(steps, n, chunk), executed=torch.ones(steps, n, chunk, dtype=torch.bool),
            dones=zeros, terminated=zeros.clone(), final_values=torch.zeros(steps, n), next_values=torch.zeros(n),
            version=0))
    return out


def measure(cfg: Config, spec: PolicySpec, trajectories: list[Trajectory], repeats: int) -> tuple[float, float]:
    """Median seconds of one update and of one weight gather, over ``repeats`` after a warm-up."""
    import ray

    from embodied.backends import RayBackend
    from embodied.workers.launch import start_actor_group

    backend = RayBackend(ClusterConfig(backend="ray"))
    group = start_actor_group(cfg, backend, spec)
    n = cfg.actor.num_ranks
    refs = [ray.put([t for r, t in enumerate(trajectories) if r % n == rank]) for rank in range(n)]
    updates, syncs = [], []
    try:
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            backend.wait(group.call_each("update", [(refs[rank], 1) for rank in range(n)]))
            t1 = time.perf_counter()
            backend.wait(group.call("weights"))
            t2 = time.perf_counter()
            if i:  # the first is a warm-up
                updates.append(t1 - t0)
                syncs.append(t2 - t1)
    finally:
        for actor in group.actors:
            ray.kill(actor)
    return statistics.median(updates), statistics.median(syncs)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Print the table; returns its rows (ranks, strategy, update_s, sync_s)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="vla", help="vla (tiny SmolVLM, tokens head), vla-flow or mlp")
    parser.add_argument("--ranks", default="1,2", help="numbers of actor ranks, comma-separated")
    parser.add_argument("--strategies", default="ddp,fsdp", help="ddp and/or fsdp (for N > 1)")
    parser.add_argument("--envs", type=int, default=16, help="envs in the rollout batch")
    parser.add_argument("--steps", type=int, default=8, help="chunk steps in the rollout batch")
    parser.add_argument("--minibatches", type=int, default=4, help="algorithm.num_minibatches")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4 envs x 2 steps, 1 minibatch, one repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.envs, args.steps, args.minibatches, args.repeats = 4, 2, 1, 1
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    policy_cfg, spec, obs = policy_case(args.policy)
    ranks = [int(r) for r in args.ranks.split(",")]
    trajectories = rollout(policy_cfg, spec, obs, args.envs, args.steps, max(ranks))
    print(f"{args.policy}: {args.envs} envs x {args.steps} chunk steps, {args.minibatches} minibatches, "
          f"1 PPO epoch, 1 torch thread per rank")
    print(f"{'ranks':>5} {'strategy':>8} {'update s':>9} {'vs 1 rank':>9} {'sync ms':>8}")
    base, rows = None, []
    for n in ranks:
        for strategy in (["ddp"] if n == 1 else args.strategies.split(",")):
            cfg = Config()
            cfg.policy = policy_cfg
            cfg.algorithm = PPOConfig(update_epochs=1, num_minibatches=args.minibatches)
            cfg.actor = ActorConfig(num_ranks=n, strategy=strategy)  # type: ignore[arg-type]
            cfg.runner.iterations = 10
            update, sync = measure(cfg, spec, trajectories, args.repeats)
            base = base or update
            print(f"{n:>5} {strategy:>8} {update:>9.3f} {base / update:>8.2f}x {1e3 * sync:>8.1f}", flush=True)
            rows.append({"ranks": n, "strategy": strategy, "update_s": update, "sync_s": sync})
    if started:
        ray.shutdown()
    return rows


if __name__ == "__main__":
    main()

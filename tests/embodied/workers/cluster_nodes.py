"""Run by ``test_cluster_nodes.py`` in a process of its own (it starts its own Ray): a simulated three-node cluster,
one training iteration on it, and where every worker ran, as JSON on the last line of stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_ppo.yaml"


def main(out_dir: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}})
    sim = cluster.add_node(num_cpus=1, resources={"sim": 2})
    learner = cluster.add_node(num_cpus=1, resources={"sim": 2, "learner": 4})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()

    from embodied.config import load_config
    from embodied.backends import ActorLostError, RayBackend
    from embodied.workers.group import Workers

    cfg = load_config(RECIPE, [
        "env.num_envs=8", "eval_env.num_envs=4", "rollout.chunk_steps=4", "runner.iterations=1",
        f"experiment.output_dir={out_dir}", "cluster.backend=ray", "cluster.num_env_workers=2",
        "cluster.num_rollout_workers=2", "actor.num_ranks=2", "env.preflight=false",
        "cluster.env_resources.resources={sim: 1}", "cluster.env_resources.group_strategy=strict_spread",
        "cluster.rollout_resources.resources={learner: 0.5}", "cluster.rollout_resources.group_strategy=pack",
        "cluster.actor_resources.resources={learner: 1}", "cluster.actor_resources.group_strategy=pack"])
    backend = RayBackend(cfg.cluster)
    workers = Workers.start(cfg, backend)
    try:
        groups = {"env": workers.env_group, "eval_env": workers.evaluator.envs.group,
                  "rollout": workers.rollout_group, "actor": workers.actor_group}
        placed = {name: ray.get(group.node_ids()) for name, group in groups.items()}
        workers.sync_weights()
        metrics = workers.update(workers.rollout(cfg.rollout.chunk_steps), iteration=1)
        ray.kill(workers.actor_group.actors[1])  # an actor rank's process dies (its node, an OOM kill...)
        rollout = workers.rollout(cfg.rollout.chunk_steps)
        try:
            workers.update(rollout, iteration=2)
            lost = "no error"
        except ActorLostError as exc:
            lost = str(exc)
    finally:
        workers.close()
        backend.shutdown()
    nodes = {"head": cluster.head_node.node_id, "sim": sim.node_id, "learner": learner.node_id}
    print(json.dumps({"nodes": nodes, "placed": placed, "loss": metrics["train/loss"], "lost": lost}))
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])

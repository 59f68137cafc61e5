"""Placement (colocated / disaggregated), per-group resources, and versioned weight sync."""

from __future__ import annotations

import pytest
import torch

from embodied.backends import LocalBackend
from embodied.config import ConfigError, load_config
from embodied.core.registry import POLICIES
from embodied.workers.group import Workers
from embodied.workers.rollout_worker import MultiStepRolloutWorker

POLICIES.register("echo", "tests.toy_policies:EchoConfig")
BASE = ["env.id=tests.toy_envs:CountingEnv", "env.num_envs=4", "env.max_episode_steps=5", "policy.type=mlp",
        "policy.action_chunk=2", "algorithm.num_minibatches=1", "env.preflight=false"]


def start(overrides: list[str]) -> tuple[Workers, LocalBackend]:
    backend = LocalBackend()
    return Workers.start(load_config(None, [*BASE, *overrides]), backend), backend


def test_disaggregated_rollout_workers_hold_their_own_copy_synced_by_version():
    workers, backend = start(["cluster.placement=disaggregated", "cluster.num_rollout_workers=2"])
    try:
        actor = workers.actor_group.workers[0].policy
        rollouts = [w.policy for w in workers.rollout_group.workers]
        assert all(p is not actor for p in rollouts)
        assert workers.sync_weights() == 0
        with torch.no_grad():
            next(actor.parameters()).add_(1.0)  # the actor moves; a copy does not see it until a sync
        assert not torch.equal(next(rollouts[0].parameters()), next(actor.parameters()))
        workers.update(workers.rollout(chunk_steps=2), iteration=1)
        assert workers.sync_weights() == 1
        for p in rollouts:
            for mine, theirs in zip(p.parameters(), actor.parameters()):
                assert torch.equal(mine, theirs)
    finally:
        workers.close()
        backend.shutdown()


def test_colocated_rollout_workers_act_with_the_actors_module():
    workers, backend = start([])  # local default: colocated
    try:
        assert workers.colocated
        assert workers.rollout_group.workers[0].policy is workers.actor_group.workers[0].policy
    finally:
        workers.close()
        backend.shutdown()


def test_a_rollout_worker_refuses_weights_older_than_it_holds():
    workers, backend = start(["cluster.placement=disaggregated"])
    try:
        worker: MultiStepRolloutWorker = workers.rollout_group.workers[0]
        state = workers.actor_group.workers[0].weights(False)[1]
        assert worker.sync_weights((3, state)) == 3
        with pytest.raises(ValueError, match="refusing weights of version 2, older than the version 3"):
            worker.sync_weights((2, state))
    finally:
        workers.close()
        backend.shutdown()


def test_a_placement_that_does_not_fit_the_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="cluster.placement: colocated needs cluster.backend=local"):
        load_config(None, ["cluster.backend=ray", "cluster.placement=colocated"])
    with pytest.raises(ConfigError, match=r"cluster.rollout_resources.num_gpus: must be a number >= 0, got -1"):
        load_config(None, ["cluster.rollout_resources.num_gpus=-1"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without GPUs")
def test_gpus_the_machine_lacks_fail_before_any_worker_naming_the_group(monkeypatch):
    created = []
    monkeypatch.setattr(LocalBackend, "create", lambda self, *a, **k: created.append(a))
    cfg = load_config(None, [*BASE, "cluster.actor_resources.num_gpus=1"])
    with pytest.raises(ConfigError, match=r"cluster.actor_resources.num_gpus: the worker groups reserve 1 GPUs "
                                          r"\(actor: 1 x 1\) but the local backend has 0"):
        Workers.start(cfg, LocalBackend())
    assert not created


@pytest.mark.ray
def test_ray_resources_beyond_the_cluster_fail_before_any_actor(ray_session):
    from embodied.config import ClusterConfig
    from embodied.backends import RayBackend

    backend = RayBackend(ClusterConfig(backend="ray"))
    try:
        assert backend.available()["CPU"] == 2  # the test session's Ray
        cfg = load_config(None, [*BASE, "cluster.backend=ray", "cluster.env_resources.num_cpus=1",
                                 "cluster.rollout_resources.num_cpus=1"])
        with pytest.raises(ConfigError, match=r"cluster.env_resources.num_cpus: the worker groups reserve 3 CPUs "
                                              r"\(env: 2 x 1, rollout: 1 x 1\) but the ray backend has 2"):
            Workers.start(cfg, backend)
        assert not backend._actors
    finally:
        backend.shutdown()

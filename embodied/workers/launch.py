"""Starting a run's worker groups, and the seeds and restart rules shared by training and eval.

``start_env_group`` / ``start_eval_envs`` / ``start_rollout_group`` / ``start_actor_group`` build the groups that
``Workers`` (a training run, ``embodied.workers.group``) and ``Evaluator`` (``embodied.workers.evaluator``) are made
of, wired by channels; ``fresh_seed``, ``restart_or_raise`` and ``dropped_envs`` are what both do when a worker fails.
"""

from __future__ import annotations

import warnings

from embodied.core import seeds
from embodied.backends import Backend, WorkerGroup
from embodied.channels import Channel, route, shards_for_rollout_rank
from embodied.config import Config, EnvConfig, ExpertLabels, OffPolicyConfig
from embodied.config.schema import VideoConfig
from embodied.policy.base import Policy, PolicySpec
from embodied.workers.actor_worker import ActorWorker
from embodied.workers.env_group import EnvGroup
from embodied.workers.env_worker import EnvWorker
from embodied.workers.faults import WorkerFailure
from embodied.workers.link import Link
from embodied.workers.restarts import Restart, RestartBudget
from embodied.workers.rollout_worker import MultiStepRolloutWorker


EVAL_SEED_OFFSET = seeds.EVAL  # eval episode k starts from experiment.seed + this + k (embodied.core.seeds)
HOLD_EPOCHS = 3  # epochs' trajectories a rollout worker keeps for the actor, without staleness correction


def fresh_seed(seed: int, restart: int) -> int:
    """The reset seed (of global env 0) of envs rebuilt after a replayed fault at the ``restart``-th restart of a
    run of ``experiment.seed`` ``seed``: apart from the training and eval seeds, the same in every run of the seed."""
    return seeds.fresh_seed(seed, restart)


def restart_or_raise(restarts: RestartBudget, envs: EnvGroup, failure: WorkerFailure, iteration: int,
                     replayed: bool, explained: bool = False) -> Restart:
    """``restarts.restart(...)``; when it raises instead, the failure's hung ranks are left to themselves."""
    try:
        return restarts.restart(failure, iteration, replayed, explained)
    except BaseException:
        envs.abandoned |= failure.hung
        raise


def dropped_envs(envs: EnvGroup, failure: WorkerFailure, fresh: dict[int, int], restart: Restart) -> int:
    """The envs whose episodes in progress ``restart`` gives up: the failed ranks' (not already from fresh seeds in
    this epoch or round), when they restart from fresh seeds."""
    if not restart.fresh:
        return 0
    ranges = envs.env_ranges()
    return sum(ranges[r][1] - ranges[r][0] for r in failure.ranks - fresh.keys())


def overlaps(cfg: Config) -> bool:
    """Whether rollouts run while the actor trains (``runner.mode: async``, or an off-policy algorithm with
    ``algorithm.overlap``), so the rollout workers need a copy of the policy of their own."""
    return cfg.runner.mode == "async" or (isinstance(cfg.algorithm, OffPolicyConfig) and cfg.algorithm.overlap)


def start_env_group(cfg: Config, backend: Backend, env_cfg: EnvConfig, section: str, seed: int,
                    video: VideoConfig | None = None, stages: int = 1, expert: ExpertLabels | None = None) -> EnvGroup:
    """Env workers over ``env_cfg``; ``video`` makes them render and record eval videos; ``expert`` makes them label
    every visited state with their envs' scripted experts (the algorithm's ``expert_labels``).

    With pipeline ``stages``, each env worker owns ``stages`` consecutive virtual env ranks of the
    routing, one per stage, so a stage is a contiguous half (third, ...) of the worker's envs.
    """
    c = cfg.cluster
    shards = route(env_cfg.num_envs, c.num_env_workers * stages, c.num_rollout_workers)
    to_rollout, to_env = backend.channel(f"{section}-obs"), backend.channel(f"{section}-actions")
    env_links = [Link([s for s in shards if s.env_rank // stages == e], to_rollout, to_env, stages=stages)
                 for e in range(c.num_env_workers)]
    args = [(e, env_cfg, env_links[e], seed, c.torch_threads, section, video, expert)
            for e in range(c.num_env_workers)]
    group = backend.create(EnvWorker, args, c.env_resources)
    rollout_links = [Link(shards_for_rollout_rank(shards, r), to_rollout, to_env, stages=stages)
                     for r in range(c.num_rollout_workers)]
    return EnvGroup(section, env_cfg.id, group, args, rollout_links)


def start_eval_envs(cfg: Config, backend: Backend, video: VideoConfig | None) -> EnvGroup:
    return start_env_group(cfg, backend, cfg.resolved_eval_env(), "eval_env", seeds.eval_seed(cfg.experiment.seed, 0),
                           video)


def start_rollout_group(cfg: Config, backend: Backend, spec: PolicySpec, train: EnvGroup | None,
                        evaluation: EnvGroup, shared: Policy | None, inbox: Channel | None = None) -> WorkerGroup:
    """Rollout workers acting on ``train`` (None: eval only) and ``evaluation`` envs; ``inbox``: where
    async runs send them new weights mid-epoch."""
    c = cfg.cluster
    a = cfg.algorithm
    # An async run holds up to max_staleness + 1 epochs in flight; else at most two (an overlapped off-policy run).
    hold = a.staleness_limit() + 2 if a.staleness_correction else HOLD_EPOCHS
    policy = a.worker_policy(cfg.policy)  # e.g. a noise actor over the frozen policy
    return backend.create(MultiStepRolloutWorker, [
        (r, policy, spec, train.rollout_links[r] if train else None, evaluation.rollout_links[r], shared,
         c.torch_threads, cfg.experiment.seed, inbox, hold, a if a.records_observations else None,
         a.bootstraps_terminations())
        for r in range(c.num_rollout_workers)
    ], c.rollout_resources)


def start_actor_group(cfg: Config, backend: Backend, spec: PolicySpec) -> WorkerGroup:
    """``actor.num_ranks`` actor workers; several form one process group, which meets at a port that rank 0
    picks on its own node (``ActorWorker.rendezvous``), so the ranks may sit on any nodes of the cluster."""
    a, c = cfg.actor, cfg.cluster
    if a.strategy == "fsdp" and a.num_ranks == 1:
        warnings.warn("actor.strategy=fsdp with actor.num_ranks=1: there is nothing to shard over, so the one rank "
                      "holds the whole policy (as ddp); set actor.num_ranks > 1 (cluster.backend=ray) to shard",
                      stacklevel=3)
    policy = cfg.algorithm.worker_policy(cfg.policy)  # e.g. a noise actor over the frozen policy
    args = (policy, spec, cfg.algorithm, a, cfg.runner.iterations, cfg.experiment.seed, c.torch_threads)
    group = backend.create(ActorWorker, [args] * a.num_ranks, c.actor_resources)  # its training: the family's
    if a.num_ranks > 1:
        address = backend.wait(group.call("rendezvous"))[0]
        backend.wait(group.call_each("join_group", [(rank, a.num_ranks, address) for rank in range(a.num_ranks)]))
    return group



"""The worker groups of a run, wired by channels, and what the runner asks of them.

``Workers`` is a training run: env, actor and rollout groups plus an ``Evaluator``. An
``Evaluator`` alone (eval envs and rollout workers, no actor, no training envs) is what
``embodied eval`` builds; both come from the same small builder functions. An env group and the
driver's wait on its exchange with the rollout workers live in ``embodied.workers.env_group``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied.algorithms import Algorithm, RolloutReset, is_off_policy, worker_policy_config
from embodied.channels import Channel, route, shards_for_rollout_rank
from embodied.checkpoint import PACKAGES, package_version
from embodied.config import Config, EnvConfig
from embodied.config.schema import VideoConfig
from embodied.env_factory import episode_steps
from embodied.eval_plan import EvalPlan, env_eval_episodes
from embodied.placement import (ActorLostError, Backend, ClusterLostError, LocalBackend, WorkerGroup, process_rss_mib,
                                without_frames)
from embodied.policy import Policy, PolicySpec
from embodied.registry import ALGORITHMS, ENVS
from embodied.types import EpisodeStats, EvalEpisode, RolloutSummary, Trajectory
from embodied.video import VideoReport
from embodied.workers.actor_worker import ActorWorker
from embodied.workers.offpolicy_actor import OffPolicyActorWorker
from embodied.workers.env_group import EnvGroup, exchange
from embodied.workers.env_worker import EnvWorker
from embodied.workers.faults import WorkerFailure
from embodied.workers.link import Link
from embodied.workers.resources import check_resources
from embodied.workers.restarts import FaultStop, Restart, RestartBudget
from embodied.workers.rollout_worker import MultiStepRolloutWorker

EVAL_SEED_OFFSET = 1_000_000  # eval initial states never coincide with training ones
FRESH_SEED_OFFSET = 1_000_000_000  # nor do those of envs rebuilt after a replayed fault (``Workers.fresh_seed``)


def fresh_seed(seed: int, restart: int) -> int:
    """The reset seed (of global env 0) of envs rebuilt after a replayed fault at the ``restart``-th restart of a
    run of ``experiment.seed`` ``seed``: apart from the training and eval seeds, the same in every run of the seed."""
    return seed + FRESH_SEED_OFFSET + 1_000_000 * restart


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
    return cfg.runner.mode == "async" or (is_off_policy(cfg.algorithm.name) and cfg.algorithm.overlap)


def start_env_group(cfg: Config, backend: Backend, env_cfg: EnvConfig, section: str, seed: int,
                    video: VideoConfig | None = None, stages: int = 1) -> EnvGroup:
    """Env workers over ``env_cfg``; ``video`` makes them render and record eval videos.

    With pipeline ``stages``, each env worker owns ``stages`` consecutive virtual env ranks of the
    routing, one per stage, so a stage is a contiguous half (third, ...) of the worker's envs.
    """
    c = cfg.cluster
    shards = route(env_cfg.num_envs, c.num_env_workers * stages, c.num_rollout_workers)
    to_rollout, to_env = backend.channel(f"{section}-obs"), backend.channel(f"{section}-actions")
    env_links = [Link([s for s in shards if s.env_rank // stages == e], to_rollout, to_env, stages=stages)
                 for e in range(c.num_env_workers)]
    args = [(e, env_cfg, env_links[e], seed, c.torch_threads, section, video) for e in range(c.num_env_workers)]
    group = backend.create(EnvWorker, args, c.env_resources)
    rollout_links = [Link(shards_for_rollout_rank(shards, r), to_rollout, to_env, stages=stages)
                     for r in range(c.num_rollout_workers)]
    return EnvGroup(section, env_cfg.id, group, args, rollout_links)


def start_eval_envs(cfg: Config, backend: Backend, video: VideoConfig | None) -> EnvGroup:
    return start_env_group(cfg, backend, cfg.resolved_eval_env(), "eval_env", cfg.experiment.seed + EVAL_SEED_OFFSET,
                           video)


def start_rollout_group(cfg: Config, backend: Backend, spec: PolicySpec, train: EnvGroup | None,
                        evaluation: EnvGroup, shared: Policy | None, inbox: Channel | None = None) -> WorkerGroup:
    """Rollout workers acting on ``train`` (None: eval only) and ``evaluation`` envs; ``inbox``: where
    async runs send them new weights mid-epoch."""
    c = cfg.cluster
    record = is_off_policy(cfg.algorithm.name)  # replay stores the observations
    policy = worker_policy_config(cfg.policy, cfg.algorithm)  # DSRL: the noise actor over the frozen policy
    return backend.create(MultiStepRolloutWorker, [
        (r, policy, spec, train.rollout_links[r] if train else None, evaluation.rollout_links[r], shared,
         c.torch_threads, cfg.experiment.seed, inbox, cfg.algorithm.max_staleness + 2, record)
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
    policy = worker_policy_config(cfg.policy, cfg.algorithm)  # DSRL: the noise actor over the frozen policy
    args = (policy, spec, cfg.algorithm, a, cfg.runner.iterations, cfg.experiment.seed, c.torch_threads)
    actor_class = OffPolicyActorWorker if is_off_policy(cfg.algorithm.name) else ActorWorker  # replay and SAC
    group = backend.create(actor_class, [args] * a.num_ranks, c.actor_resources)
    if a.num_ranks > 1:
        address = backend.wait(group.call("rendezvous"))[0]
        backend.wait(group.call_each("join_group", [(rank, a.num_ranks, address) for rank in range(a.num_ranks)]))
    return group


@dataclass
class Evaluator:
    """Greedy episodes on the eval envs from a fixed, reproducible set of seeds.

    Eval episode ``k`` starts from seed ``experiment.seed + EVAL_SEED_OFFSET + k``, apart from
    every training seed, or, for an env that publishes a fixed eval set (``eval_episodes``), from
    its ``k``-th chosen episode (``embodied.eval_plan``); ``eval_env.num_envs`` episodes run at a
    time (one round).
    """

    cfg: Config
    backend: Backend
    envs: EnvGroup
    rollout_group: WorkerGroup
    restarts: RestartBudget  # shared with the training envs in a training run
    iteration: int | None = None  # the training iteration being evaluated (labels restarts)
    dropped: list[int] = dataclasses.field(default_factory=list)  # eval episodes the last ``run`` left out
    # Signatures of faults seen to replay: met again in a later eval (same round, same env), the first
    # failure already counts as the replay, so each eval spends one restart on it, not two.
    replayed: set[tuple] = dataclasses.field(default_factory=set)
    # Held while an exchange's calls are submitted, so every rollout rank serves exchanges in one order
    # (async runs submit rollouts and evals from two threads; interleaved, two ranks could wait on each other).
    submit: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @classmethod
    def start(cls, cfg: Config, backend: Backend, video: VideoConfig | None = None) -> Evaluator:
        """Eval envs and rollout workers only: no actor, no training envs (``embodied eval``)."""
        check_resources(cfg, backend, training=False)
        envs = start_eval_envs(cfg, backend, video)
        spec = backend.wait(envs.group.call("spec"))[0]
        return cls(cfg, backend, envs, start_rollout_group(cfg, backend, spec, None, envs, None),
                   RestartBudget.of(cfg.runner))

    def load_checkpoint(self, actor_state: dict[str, Any], version: int = 0) -> None:
        """Load a checkpoint's policy (``load_checkpoint(...)["actor"]``) into every rollout worker."""
        self.backend.wait(self.rollout_group.call("load_checkpoint", actor_state, version))

    def plan(self, episodes: int) -> EvalPlan:
        """The episodes of an eval of ``episodes`` episodes (``embodied.eval_plan``): seeded, or spread over
        the fixed eval set the eval env publishes (computed once)."""
        return EvalPlan.make(self.cfg.resolved_eval_env().num_envs, episodes, self.fixed_episodes)

    @functools.cached_property
    def fixed_episodes(self) -> list[EvalEpisode] | None:
        """The fixed eval set the eval env's class publishes (``eval_episodes``), or None: seeded episodes."""
        return env_eval_episodes(self.cfg.resolved_eval_env())

    def run(self, episodes: int, video_dir: str | None = None, sample: bool = False,
            progress: Callable[[list[EpisodeStats]], None] | None = None) -> list[EpisodeStats]:
        """Every episode of ``plan(episodes)``'s rounds, ordered by eval episode index.

        An episode's ``env_index`` is its eval episode index ``k`` (seed ``eval_seed(k)``, or the
        fixed episode ``plan(episodes).fixed[k]``), so ``[e for e in run(n) if e.env_index < n]`` is
        the same set of initial states every time. With ``video_dir`` the episodes ``plan.recorded``
        names are recorded into it (encoded in the background: see ``take_videos``). With ``sample``
        the policy samples its actions (seeded by each round's reset seed, so the episodes repeat as
        well) instead of acting greedily.

        A fault that replays (see ``_round``) leaves the failed worker's episodes of that round out; their
        eval episode indices are in ``dropped`` afterwards. ``progress`` is called with each round's episodes
        (of the ``episodes`` asked for) as the round ends.
        """
        eval_cfg = self.cfg.resolved_eval_env()
        plan = self.plan(episodes)
        self.dropped = []
        chunk_steps = math.ceil(episode_steps(eval_cfg) / self.cfg.policy.action_chunk)
        record = plan.recorded(self.cfg.logger.video.max_videos) if video_dir is not None else []
        starts = [link.start for link in self.envs.rollout_links]  # rollout rank -> its first env
        stats: list[EpisodeStats] = []
        for round_ in range(plan.rounds):
            ids = plan.episode_ids(round_)
            parts, fresh = self._round(chunk_steps, self.eval_seed(round_ * plan.n_envs), ids, plan.options(round_),
                                       record, video_dir, sample)
            left_out = {ids[g] for a, b in (self.envs.env_ranges()[r] for r in fresh) for g in range(a, b)}
            self.dropped += sorted(k for k in left_out if k < plan.episodes)
            found = [dataclasses.replace(e, env_index=ids[start + e.env_index])
                     for part, start in zip(parts, starts) for e in part if ids[start + e.env_index] not in left_out]
            stats += (counted := [e for e in found if e.env_index < plan.episodes])  # fillers of the last rounds dropped
            if progress is not None:
                progress(counted)
        return sorted(stats, key=lambda e: e.env_index)

    def _round(self, chunk_steps: int, seed: int, episode_ids: list[int], options: list[dict] | None,
               record: list[int], video_dir: str | None,
               sample: bool = False) -> tuple[list[list[EpisodeStats]], set[int]]:
        """One eval round: each rollout rank's episodes, and the env ranks whose episodes are not the eval's.

        A failed eval env worker is replaced and the round redone (every round resets its envs, so there
        is nothing else to put back), within the run's restart rate (``embodied.workers.restarts``). A fault
        that comes back the same way on the redo (``WorkerFailure.signature``) would come back on every redo:
        the failed worker's envs then play from fresh seeds (without the fixed set's options or videos) so
        that the others' episodes, still the eval's fixed ones, can finish; the caller leaves the fresh ones
        out. So does a worker whose rebuilt process failed alike again (a first sign of a broken env).
        """
        fresh: dict[int, int] = {}  # env rank -> the seed its envs restart from (a fault replayed)
        last = None  # the signature of this round's last failure
        while True:
            args = [(chunk_steps, fresh[r], episode_ids, None, None, []) if r in fresh else
                    (chunk_steps, seed, episode_ids, video_dir, options, record) for r in range(len(self.envs.group))]
            with self.submit:
                env_handles = self.envs.group.call_each("eval_epoch", args)
                handles = self.rollout_group.call("eval_epoch", chunk_steps, seed, sample)
            try:
                return exchange(self.backend, handles, self.envs, env_handles), set(fresh)
            except WorkerFailure as failure:
                without_frames(failure)  # its finished frames held this round's futures and workers in a cycle
                self.backend.check_connected()  # a worker lost with its cluster is not restarted
                where = f"eval episodes from {min(episode_ids)}" + (f" at iteration {self.iteration}" if self.iteration else "")
                # A fault known to replay, met again on the fixed episodes, is that state's (not a sign of a
                # broken env); met again on fresh seeds, it is not.
                known = failure.signature in self.replayed and not failure.ranks & fresh.keys()
                replayed, last = failure.signature == last or known, failure.signature
                if replayed:
                    self.replayed.add(failure.signature)
                restart = restart_or_raise(self.restarts, self.envs, failure, self.iteration or 0, replayed, known)
                new_seed = fresh_seed(self.cfg.experiment.seed, restart.number) if restart.fresh else None
                dropped = dropped_envs(self.envs, failure, fresh, restart)
                self.restarts.announce(failure, where, restart, new_seed, dropped)
                if new_seed is not None:
                    fresh |= dict.fromkeys(failure.ranks, new_seed)
                self.envs.replace(self.backend, self.rollout_group, failure, None, seed)

    def eval_seed(self, k: int) -> int:
        """The reset seed of eval episode ``k``."""
        return self.cfg.experiment.seed + EVAL_SEED_OFFSET + k

    def provenance(self) -> dict[str, Any]:
        """What can move the eval's numbers: the versions of the framework's stack (``stack``) and of the
        packages the eval env's class names (``versions``, its ``packages``), plus what the env itself
        reports (``provenance()`` of a suite's env: GL renderer, image size, settle and max steps...)."""
        env_packages = getattr(ENVS.resolve(self.cfg.resolved_eval_env().id), "packages", ())
        return {"stack": {p: package_version(p) for p in PACKAGES},
                "versions": {p: package_version(p) for p in env_packages},
                **self.backend.wait(self.envs.group.call("provenance"))[0]}

    def take_videos(self, wait: bool = False) -> VideoReport:
        """Videos finished since the last call (``wait``: finish the queued ones first)."""
        return VideoReport.merge(self.backend.wait(self.envs.group.call("take_videos", wait)))

    def close(self) -> None:
        """Finish queued videos and close the eval envs (but hung ones)."""
        self.envs.close(self.backend)


@dataclass
class Workers:
    """Env, rollout and actor groups of a training run, and its evaluator."""

    cfg: Config
    backend: Backend
    env_group: WorkerGroup
    rollout_group: WorkerGroup
    actor_group: WorkerGroup  # actor.num_ranks ranks (one process group); rank 0 answers for them
    evaluator: Evaluator
    spec: PolicySpec
    colocated: bool  # rollout workers act with the actor's own module
    algorithm: Algorithm  # the driver's copy: asked only how envs reset before a rollout
    train_envs: EnvGroup  # env_group with the rollout ranks' side of its exchange
    restarts: RestartBudget  # the run's restart rate (runner.max_worker_restarts...), shared with the evaluator
    weights_inbox: Channel | None = None  # async runs: new weights reach rollout workers mid-epoch (key rollout<r>)
    # Rollout rank r's trajectories to actor rank r mod N (key actor<rank>), straight from worker to worker.
    trajectories: Channel | None = None
    epochs: int = 0  # rollout epochs done: the next one's number

    @classmethod
    def start(cls, cfg: Config, backend: Backend) -> Workers:
        """Create channels and workers; envs are built (and fail) before the policy is."""
        c = cfg.cluster
        check_resources(cfg, backend, training=True)
        train = start_env_group(cfg, backend, cfg.env, "env", cfg.experiment.seed,
                                stages=cfg.rollout.pipeline_stages)
        evaluation = start_eval_envs(cfg, backend, cfg.logger.video if cfg.runner.eval_video != "none" else None)
        spec = backend.wait(train.group.call("spec"))[0]
        actor = start_actor_group(cfg, backend, spec)
        # Colocated needs the actor in this process: the local backend (the config loader refuses
        # placement=colocated with backend=ray).
        # Async runs and overlapped off-policy runs train the actor while rollout workers act: they need their own copy.
        colocated = isinstance(backend, LocalBackend) and c.placement != "disaggregated" and not overlaps(cfg)
        shared = actor.workers[0].policy if colocated else None
        inbox = backend.channel("weights") if cfg.runner.mode == "async" else None
        rollout = start_rollout_group(cfg, backend, spec, train, evaluation, shared, inbox)
        restarts = RestartBudget.of(cfg.runner)
        return cls(cfg, backend, train.group, rollout, actor, Evaluator(cfg, backend, evaluation, rollout, restarts),
                   spec, colocated, ALGORITHMS.resolve(cfg.algorithm.name)(cfg.algorithm), train, restarts, inbox,
                   backend.channel("trajectories"))

    def sync_weights(self) -> int:
        """Publish the actor's weights to every rollout worker; returns the version."""
        weights = self.actor_group.call("weights", self.colocated)[0]  # a handle: Ray ships it once, by reference
        return self.backend.wait(self.rollout_group.call("sync_weights", weights))[0]

    def rollout(self, chunk_steps: int, iteration: int = 0, reset: RolloutReset | None = None) -> list[RolloutSummary]:
        """One rollout epoch: env and rollout workers trade shards for ``chunk_steps`` chunk steps. Each rollout
        worker keeps its trajectory for the actor (``update``) and returns its summary.

        ``reset`` (the algorithm's ``rollout_reset``) resets every env first, in seed groups.

        An env worker that fails (raises, hangs past ``env.step_timeout_s``, dies) is replaced within the
        run's restart rate (``embodied.workers.restarts``) and the epoch redone from the start: every env
        worker's envs and every rollout worker's RNG go back to the snapshot taken before it, so the redone
        epoch is the one a run without the failure would have had, and nothing it did is counted twice.
        When the rate has no restart left, or the env fails from any state, ``FaultStop`` is raised with
        that snapshot (``FaultStop.state``).

        A fault that comes back the same way on that replay (``WorkerFailure.signature``) would only
        come back again: the failed worker's envs restart from ``fresh_seed`` instead (for the rest of
        the epoch), their episodes in progress counted in ``restarts.episodes_dropped``; the other
        workers still replay exactly, and only the returned (last) attempt's transitions are kept.
        """
        seed, group = (reset.seed, reset.group_size) if reset is not None else (None, 1)
        epoch, self.epochs = self.epochs, self.epochs + 1
        # Handles (Ray keeps the values, owned by this process): a restart redoes the epoch from them, and a fault
        # that stops the run leaves them to the runner's checkpoint of the last completed iteration.
        snapshot = self.env_group.call("get_state"), self.rollout_group.call("rng_state")
        fresh: dict[int, int] = {}  # env ranks whose envs restart from fresh seeds (a fault replayed) -> the seed
        last = None  # the signature of this epoch's last failure
        while True:
            seeds = [fresh.get(rank, seed) if seed is not None else None for rank in range(len(self.env_group))]
            with self.evaluator.submit:
                env_handles = self.env_group.call_each("run_epoch", [(chunk_steps, s, iteration, group) for s in seeds])
                handles = self.rollout_group.call("rollout_epoch", chunk_steps, epoch)
            try:
                return exchange(self.backend, handles, self.train_envs, env_handles)
            except WorkerFailure as failure:
                without_frames(failure)  # its finished frames held this round's futures and workers in a cycle
                self.backend.check_connected()  # a worker lost with its cluster is not restarted
                replayed, last = failure.signature == last, failure.signature
                restart = self._restart(failure, iteration, replayed, snapshot)
                new_seed = self.fresh_seed(restart.number) if restart.fresh else None
                self.restarts.announce(failure, f"iteration {iteration}", restart, new_seed,
                                       dropped_envs(self.train_envs, failure, fresh, restart))
                if new_seed is not None:
                    fresh |= dict.fromkeys(failure.ranks, new_seed)
                states, rngs = snapshot
                self.train_envs.replace(self.backend, self.rollout_group, failure, states,
                                        self.cfg.experiment.seed + 1_000_003 * self.restarts.used, fresh)
                self.backend.wait(self.rollout_group.call_each("set_rng_state", [(r,) for r in rngs]))

    def _restart(self, failure: WorkerFailure, iteration: int, replayed: bool, snapshot: tuple[Any, Any]) -> Restart:
        """The restart ``failure`` gets (``restart_or_raise``); a ``FaultStop`` leaves with the epoch's ``snapshot``
        (the state the failed epoch started from: the runner checkpoints it as the last completed iteration)."""
        try:
            return restart_or_raise(self.restarts, self.train_envs, failure, iteration, replayed)
        except FaultStop as stop:
            states, rngs = snapshot
            stop.state = {"envs": self.backend.wait(states), "rollout_rng": self.backend.wait(rngs)}
            raise

    def fresh_seed(self, restart: int) -> int:
        """The reset seed (of global env 0) of envs rebuilt after a replayed fault at the run's ``restart``-th
        restart (``fresh_seed``)."""
        return fresh_seed(self.cfg.experiment.seed, restart)

    def rss_metrics(self, timeout_s: float = 5.0) -> dict[str, float]:
        """``sys/rss_mib/<worker>``: the resident memory (MiB) of the driver and of every worker's process
        (``env0``, ``eval_env0``, ``rollout0``, ``actor0``...; on the local backend the workers are threads of
        the driver). A worker that does not answer within ``timeout_s`` (dead, or its process busy) is left out."""
        metrics = {"sys/rss_mib/driver": process_rss_mib()}
        for name, group in (("env", self.env_group), ("eval_env", self.evaluator.envs.group),
                            ("rollout", self.rollout_group), ("actor", self.actor_group)):
            for rank, handle in enumerate(group.rss_mib()):
                try:
                    metrics[f"sys/rss_mib/{name}{rank}"] = self.backend.wait([handle], timeout_s)[0]
                except ClusterLostError:
                    raise
                except Exception:  # noqa: BLE001 - a metric never stops training; a failed worker shows elsewhere
                    continue
        return {k: float(v) for k, v in metrics.items() if v is not None}

    def update(self, rollout: list[RolloutSummary], iteration: int) -> dict[str, float]:
        """One actor update on the epoch ``rollout`` summarises: rollout rank r sends its trajectory to actor rank
        r mod ``actor.num_ranks`` over the trajectory channel (never through the driver), and every actor rank
        trains on what it received (its metrics are the whole batch's: rank 0's are returned)."""
        n, epoch = len(self.actor_group), rollout[0].epoch
        assert self.trajectories is not None
        sent = self.rollout_group.call_each("send_trajectory", [(epoch, self.trajectories, r % n)
                                                                for r in range(len(self.rollout_group))])
        sources = [len(range(rank, len(self.rollout_group), n)) for rank in range(n)]
        updates = self.actor_group.call_each("update_from", [(self.trajectories, sources[rank], iteration)
                                                            for rank in range(n)])
        self.backend.wait(sent)
        return self._actor_results(updates, f"the update of iteration {iteration}")[0]

    def _actor_results(self, handles: list[Any], what: str) -> list[Any]:
        """The actor ranks' results; the first rank whose process died (the others then wait on it in their
        collectives) raises ``ActorLostError`` at once, naming it."""
        pending = list(handles)
        while pending:
            for done in self.backend.wait_any(pending):
                pending.remove(done)
                try:
                    self.backend.wait([done])
                except ClusterLostError:
                    raise
                except Exception as exc:
                    if self.backend.died(exc):
                        raise ActorLostError(f"actor rank {handles.index(done)} of {len(handles)} died during {what} "
                                             f"({type(exc).__name__}); the actor's ranks cannot go on without it") \
                            from exc
                    raise
        return self.backend.wait(handles)

    def take_trajectories(self, rollout: list[RolloutSummary]) -> list[Trajectory]:
        """The trajectories of the epoch ``rollout`` summarises, brought to the driver and let go by the rollout
        workers (for tools and tests; training never does this)."""
        return self.backend.wait(self.rollout_group.call("take_trajectory", rollout[0].epoch))

    def evaluate(self, episodes: int, video_dir: str | None = None) -> list[EpisodeStats]:
        """Greedy episodes from the fixed eval seeds (see ``Evaluator.run``)."""
        return self.evaluator.run(episodes, video_dir)

    def actor_state(self) -> dict[str, Any]:
        return self.backend.wait(self.actor_group.call("state"))[0]

    def save_checkpoint(self, path: Path, extra: dict[str, Any]) -> Path:
        """The actor writes the checkpoint folder ``path`` (trainer state ``extra`` + its own)."""
        self.backend.wait(self.actor_group.call("save_checkpoint", str(path), extra))
        return path

    def resume_state(self) -> dict[str, Any]:
        """What exact resume needs beyond the actor: each env worker's envs mid-episode (per stage,
        pickled; a str says why not) and each rollout worker's RNG."""
        return {"envs": self.backend.wait(self.env_group.call("get_state")),
                "rollout_rng": self.backend.wait(self.rollout_group.call("rng_state"))}

    def restore(self, state: dict[str, Any]) -> list[str]:
        """Put back ``resume_state()`` output (without ``envs``: the envs stay as they are); returns what could
        not be restored (and why)."""
        problems = []
        envs = state.get("envs") or []
        reasons = [s for rank in envs for s in rank if isinstance(s, str)]
        stages = self.cfg.rollout.pipeline_stages
        if "envs" not in state and "rollout_rng" in state:
            pass  # left out on purpose (snapshots not trusted: ``embodied.trust.trusted`` said why)
        elif reasons:
            problems.append(f"the envs were not saved ({reasons[0]})")
        elif len(envs) != len(self.env_group) or any(len(rank) != stages for rank in envs):
            problems.append(f"the envs were saved by {len(envs)} env workers, this run has {len(self.env_group)} "
                            f"(x {stages} pipeline stages)")
        else:
            try:
                self.backend.wait(self.env_group.call_each("set_state", [(rank,) for rank in envs]))
            except ValueError as exc:  # e.g. another env.num_envs
                problems.append(str(exc))
        rng = state.get("rollout_rng") or []
        if len(rng) == len(self.rollout_group):
            self.backend.wait(self.rollout_group.call_each("set_rng_state", [(r,) for r in rng]))
        else:
            problems.append(f"the RNG of {len(rng)} rollout workers was saved, this run has {len(self.rollout_group)}")
        return problems

    def load_actor_state(self, state: dict[str, Any]) -> None:
        """Restore the actor (policy, optimizer, version) from ``actor_state()`` output."""
        self.backend.wait(self.actor_group.call("load_state", state))

    def close(self) -> None:
        """Close the envs (videos finished first); hung env workers are left (see ``EnvGroup.close``)."""
        self.train_envs.close(self.backend)
        self.evaluator.close()

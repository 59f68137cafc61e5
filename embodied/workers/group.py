"""The worker groups of a run, wired by channels, and what the runner asks of them.

``Workers`` is a training run: env, actor and rollout groups plus an ``Evaluator`` (``embodied.workers.evaluator``,
which ``embodied eval`` builds alone); both come from the builder functions of ``embodied.workers.launch``. An env
group and the driver's wait on its exchange with the rollout workers live in ``embodied.workers.env_group``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied.core import seeds
from embodied.algorithms import LearnerSpec, RolloutReset, build_learner
from embodied.backends import (ActorLostError, Backend, ClusterLostError, LocalBackend, WorkerGroup, process_rss_mib,
                               without_frames)
from embodied.channels import Channel
from embodied.config import Config
from embodied.core.types import EpisodeStats, RolloutSummary, Trajectory
from embodied.policy.base import PolicySpec
from embodied.workers.env_group import EnvGroup, exchange
from embodied.workers.evaluator import Evaluator
from embodied.workers.faults import WorkerFailure
from embodied.workers.launch import (dropped_envs, fresh_seed, overlaps, restart_or_raise, start_actor_group,
                                     start_env_group, start_eval_envs, start_rollout_group)
from embodied.workers.resources import check_resources
from embodied.workers.restarts import FaultStop, Restart, RestartBudget


Resets = Callable[[int, int, int], "RolloutReset | None"]  # (iteration, num_envs, seed) -> how envs start it
_WARNED: set[type] = set()
# How long a failed actor rank's peers are watched for a death that caused the failure (a collective sees the
# closed socket before Ray reports the process gone: about a second; more on a loaded machine).
PEER_DEATH_GRACE_S = 30.0


def rollout_resets(cfg: Config, spec: PolicySpec) -> Resets | None:
    """How the envs start each rollout epoch of an on-policy run: its config's ``rollout_reset`` (None for an
    off-policy run). A learner written when ``rollout_reset`` was the learner's (a method of its class) is built
    once here and asked, for this release, with one FutureWarning naming the new place."""
    a = cfg.algorithm
    if a.off_policy:
        return None
    cls = a.algorithm_type()
    if not callable(getattr(cls, "rollout_reset", None)):
        return a.rollout_reset
    if cls not in _WARNED:
        _WARNED.add(cls)
        warnings.warn(f"{cls.__module__}.{cls.__qualname__}.rollout_reset: how envs start a rollout epoch is now the "
                      f"config's (OnPolicyConfig.rollout_reset, docs/extending.md); move it to "
                      f"{type(a).__name__}. The learner's method is asked for this release", FutureWarning, stacklevel=2)
    return build_learner(a, LearnerSpec(spec, cfg.policy.action_chunk, cfg.experiment.seed, cfg.algorithm.lr,
                                        cfg.runner.iterations, cfg.actor.num_ranks)).rollout_reset


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
    resets: Resets | None  # how envs start each rollout epoch (on-policy runs: OnPolicyConfig.rollout_reset)
    train_envs: EnvGroup  # env_group with the rollout ranks' side of its exchange
    restarts: RestartBudget  # the run's restart rate (runner.faults.max_worker_restarts...), shared with the evaluator
    weights_inbox: Channel | None = None  # async runs: new weights reach rollout workers mid-epoch (key rollout<r>)
    # Rollout rank r's trajectories to actor rank r mod N (key actor<rank>), straight from worker to worker.
    trajectories: Channel | None = None
    epochs: int = 0  # rollout epochs done: the next one's number

    @classmethod
    def start(cls, cfg: Config, backend: Backend) -> Workers:
        """Create channels and workers; envs are built (and fail) before the policy is."""
        c = cfg.cluster
        check_resources(cfg, backend, training=True)
        labels = cfg.algorithm.expert_labels()  # an algorithm that trains on the scripted experts' actions
        train = start_env_group(cfg, backend, cfg.env, "env", cfg.experiment.seed, stages=cfg.rollout.pipeline_stages,
                                expert=None if labels is None else dataclasses.replace(labels, seed=cfg.experiment.seed))
        # A mixture eval env: this evaluator plays its first member; PeriodicEval adds the others beside it.
        eval_cfg = cfg.member_eval(cfg.eval_members()[0])
        evaluation = start_eval_envs(eval_cfg, backend, cfg.logger.video if cfg.runner.eval_video != "none" else None)
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
        return cls(cfg, backend, train.group, rollout, actor, Evaluator(eval_cfg, backend, evaluation, rollout, restarts),
                   spec, colocated, rollout_resets(cfg, spec), train, restarts, inbox,
                   backend.channel("trajectories"))

    def sync_weights(self) -> int:
        """Publish the actor's weights to every rollout worker; returns the version."""
        weights = self.actor_group.call("weights", self.colocated)[0]  # a handle: Ray ships it once, by reference
        return self.backend.wait(self.rollout_group.call("sync_weights", weights))[0]

    def rollout(self, chunk_steps: int, iteration: int = 0, reset: RolloutReset | None = None) -> list[RolloutSummary]:
        """One rollout epoch: env and rollout workers trade shards for ``chunk_steps`` chunk steps. Each rollout
        worker keeps its trajectory for the actor (``update``) and returns its summary.

        ``reset`` (the algorithm config's ``rollout_reset``) resets every env first, in seed groups.

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
            bases = [fresh.get(rank, seed) if seed is not None else None for rank in range(len(self.env_group))]
            with self.evaluator.submit:
                env_handles = self.env_group.call_each("run_epoch", [(chunk_steps, s, iteration, group) for s in bases])
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
                                        seeds.restart_seed(self.cfg.experiment.seed, self.restarts.used), fresh)
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

    def busy_metrics(self) -> dict[str, float]:
        """``busy/<worker><rank>/<activity>``: the seconds each training env worker, rollout worker and actor rank spent
        on each activity since the last call (``embodied.core.timing``); a worker that does not answer is left out."""
        metrics: dict[str, float] = {}
        for name, group in (("env", self.env_group), ("rollout", self.rollout_group), ("actor", self.actor_group)):
            try:
                answers = self.backend.wait(group.call("take_busy"))
            except ClusterLostError:
                raise
            except Exception:  # noqa: BLE001 - a metric never stops training; a failed worker shows elsewhere
                continue
            for rank, seconds in enumerate(answers):
                metrics |= {f"busy/{name}{rank}/{activity}": float(v) for activity, v in seconds.items()}
        return metrics

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
        collectives) raises ``ActorLostError`` at once, naming it. A rank whose collective failed because a peer
        died ("connection reset by peer") can be reported before that death: the death is named, not the echo."""
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
                        raise self._rank_lost(handles, done, what, exc) from exc
                    lost = self._dead_peer(handles, pending, what)
                    if lost is not None:
                        raise lost from exc
                    raise
        return self.backend.wait(handles)

    def _rank_lost(self, handles: list[Any], dead: Any, what: str, exc: BaseException) -> ActorLostError:
        return ActorLostError(f"actor rank {handles.index(dead)} of {len(handles)} died during {what} "
                              f"({type(exc).__name__}); the actor's ranks cannot go on without it")

    def _dead_peer(self, handles: list[Any], pending: list[Any], what: str) -> ActorLostError | None:
        """The first of the ``pending`` ranks whose process is found dead within ``PEER_DEATH_GRACE_S`` (Ray reports
        a death a moment after the peers' sockets close), or None. Threads (the local backend) never die alone."""
        if isinstance(self.backend, LocalBackend):
            return None
        deadline = time.monotonic() + PEER_DEATH_GRACE_S
        left = list(pending)
        while left and time.monotonic() < deadline:
            for handle in list(left):
                try:
                    self.backend.wait([handle], timeout=0.2)
                    left.remove(handle)
                except TimeoutError:
                    continue
                except ClusterLostError:
                    raise
                except Exception as exc:
                    if self.backend.died(exc):
                        return self._rank_lost(handles, handle, what, exc)
                    left.remove(handle)
        return None

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
            pass  # left out on purpose (snapshots not trusted: ``embodied.checkpoint.trust.trusted`` said why)
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

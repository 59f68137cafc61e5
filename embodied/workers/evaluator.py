"""``Evaluator``: greedy episodes on the eval envs from a fixed, reproducible set of seeds.

What ``embodied eval`` and SFT build alone (eval envs and rollout workers, no actor, no training envs), and what a
training run's ``Workers`` holds beside its training groups.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from embodied.core import seeds
from embodied.backends import Backend, WorkerGroup, without_frames
from embodied.checkpoint.store import PACKAGES, package_version
from embodied.config import Config
from embodied.config.schema import VideoConfig
from embodied.core.registry import ENVS
from embodied.core.types import EpisodeStats, EvalEpisode
from embodied.env_runtime.factory import episode_steps
from embodied.logging.video import VideoReport
from embodied.workers.env_group import EnvGroup, exchange
from embodied.workers.eval_plan import EvalPlan, env_eval_episodes
from embodied.workers.faults import WorkerFailure
from embodied.workers.launch import (dropped_envs, fresh_seed, restart_or_raise, start_eval_envs,
                                     start_rollout_group)
from embodied.workers.resources import check_resources
from embodied.workers.restarts import RestartBudget


@dataclass
class Evaluator:
    """Greedy episodes on the eval envs from a fixed, reproducible set of seeds.

    Eval episode ``k`` starts from seed ``seeds.eval_seed(experiment.seed, k)``, apart from
    every training seed, or, for an env that publishes a fixed eval set (``eval_episodes``), from
    its ``k``-th chosen episode (``embodied.workers.eval_plan``); ``eval_env.num_envs`` episodes run at a
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
        try:
            spec = backend.wait(envs.group.call("spec"))[0]
            rollout = start_rollout_group(cfg, backend, spec, None, envs, None)
        except BaseException:
            backend.release(envs.group)  # a backend shared by several evals goes on without them
            raise
        return cls(cfg, backend, envs, rollout, RestartBudget.of(cfg.runner))

    def load_checkpoint(self, actor_state: dict[str, Any], version: int = 0) -> None:
        """Load a checkpoint's policy (``load_checkpoint(...)["actor"]``) into every rollout worker."""
        self.backend.wait(self.rollout_group.call("load_checkpoint", actor_state, version))

    def plan(self, episodes: int) -> EvalPlan:
        """The episodes of an eval of ``episodes`` episodes (``embodied.workers.eval_plan``): seeded, or spread over
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
        return seeds.eval_seed(self.cfg.experiment.seed, k)

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

    def release(self) -> None:
        """End the workers ``start`` built (eval envs and rollout workers) on a backend that goes on without them
        (``Backend.release``): several suites evaluated on one backend hold one suite's workers at a time. Not for
        a training run's evaluator, whose rollout workers are training's."""
        self.backend.release(self.envs.group)
        self.backend.release(self.rollout_group)



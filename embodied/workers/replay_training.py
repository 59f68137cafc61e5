"""``ReplayTraining``: the actor worker's part for an off-policy algorithm — replay in the actor process, around the
algorithm's learner (``OffPolicyConfig.learner()``, an ``embodied.algorithms.base.OffPolicyLearner``).

Each ``update`` receives the rollout epoch's trajectories (over the same ``trajectories`` channel as PPO),
adds their chunk transitions to a bounded replay buffer (``embodied.replay.buffer``), and makes
``algorithm.utd_ratio`` gradient updates per chunk transition received, once replay holds
``algorithm.learning_starts`` transitions; with ``algorithm.demos`` (RLPD) ``algorithm.demo_ratio`` of every batch
comes from the demonstrations' own replay (``embodied.replay.demos``), built here at start. Fractional ratios
carry over between epochs (``owed``), so the run keeps the ratio exactly. Each gradient update is a weight
version: the runner syncs weights every ``algorithm.sync_every`` of them (``embodied.runs.offpolicy_iterations``).

With ``actor.num_ranks > 1`` (data parallel, as PPO's ranks): rollout rank r's trajectories reach actor rank
r mod N, so each rank's replay holds its own share; the pacing counts what all ranks received, so every rank
makes the same number of updates; each update draws ``batch_size / N`` rows from every rank's replay and the
gradients are summed over the ranks (the learner, given the ranks by ``OffPolicyLearner.join``), so the ranks'
weights stay identical.

Checkpoints hold the learner's state (``OffPolicyLearner.state_dict``: its networks, optimizers, stream) in trainer.pt
under the learner's own name (``OffPolicyLearner.name``: ``<name>``, ``<name>_counters`` and, per rank,
``<name>_generator``; ``embodied.checkpoint.migrate`` brings an older checkpoint's keys forward) and,
unless ``algorithm.checkpoint_replay`` is off, the replay buffer as chunk files in the checkpoint's ``replay/``
folder (``ReplayBuffer.save``), in the same atomic write as the policy: a full disk leaves the previous checkpoint as
it was. Chunks unchanged since the checkpoint this actor last wrote or resumed from are hard-linked from it. With
several ranks every rank's share is gathered to rank 0, which writes it as ``replay/rank_K/`` (and each rank's
streams in trainer.pt's ``rank_shares``); on resume each rank loads its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch

from embodied.algorithms.base import LearnerSpec, OffPolicyLearner, UpdateContext, build_learner
from embodied.algorithms.transitions import ReplaySample
from embodied.checkpoint.store import REPLAY_DIR
from embodied.config import OffPolicyConfig
from embodied.core.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.core.timing import Busy
from embodied.core.types import Trajectory
from embodied.policy.base import Policy, PolicyConfig, PolicySpec
from embodied.policy.q_functions import require_q_functions
from embodied.replay.buffer import ReplayBuffer, save_replay
from embodied.replay.demos import demo_replay, fit_demos, mixed_sample, open_demos
from embodied.workers.ranks import Ranks

RANK_SEED_STRIDE = 1_000_003  # rank r's replay and learner streams start from experiment.seed + r * this


# Policy methods an off-policy run once called, and what decides now (each named once, when a policy still has it).
RETIRED_POLICY_HOOKS = {
    "replay_actions": "what replay's action column holds is the learner's (OffPolicyLearner.replay_actions; "
                      "docs/extending_offpolicy.md)",
    "replay_observation": "what replay keeps of an observation is the algorithm's (AlgorithmConfig.replay_record; "
                          "docs/extending_policy.md)",
}


class ReplayTraining:
    """Replay, the algorithm's learner and the UTD pacing, around the policy the actor worker holds."""

    rebuilds_optimizer: ClassVar[bool] = False  # the policy's optimizer is the learner's (ddp: the same tensors)
    value_names: frozenset[str] = frozenset()  # the learner's own critics warm up; the policy has no value head

    def __init__(self, policy: Policy, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: OffPolicyConfig,
                 learner_spec: LearnerSpec, seed: int) -> None:
        if algorithm.needs_q_functions:
            require_q_functions(policy_cfg, algorithm.name)
        self.algo, self.policy, self.seed = algorithm, policy, seed
        self.learner: OffPolicyLearner = build_learner(algorithm, learner_spec, policy)
        for hook, now in RETIRED_POLICY_HOOKS.items():  # a policy's hook of before: the algorithm decides now
            if hook in vars(type(policy)):
                warnings.warn(f"{type(policy).__name__}.{hook} is no longer called: {now}", FutureWarning,
                              stacklevel=2)
        self.prefix = self.learner.name  # its checkpoint keys and metric names
        self.busy = Busy()  # seconds inserting into replay, sampling it and in the learner (ActorWorker.take_busy)
        self.ranks = Ranks()
        self.generator = torch.Generator().manual_seed(seed)  # replay's rows (this rank's stream)
        self.replay = ReplayBuffer(algorithm.replay_capacity)
        self.demos: ReplayBuffer | None = None  # RLPD: the demonstrations' chunk transitions, built once here
        if algorithm.demos:
            data = open_demos(algorithm.demos, policy_cfg.action_chunk)
            self.demos = demo_replay(data, fit_demos(data, spec, policy_cfg.action_chunk),
                                     *algorithm.replay_returns(), column=self.learner.demo_actions,
                                     bootstrap_terminations=algorithm.replay_bootstraps_terminations())
            if policy.observes:  # merged into those policy.init_from loaded (unless they are frozen)
                policy.observe({k: self.demos.storage[f"obs/{k}"][:len(self.demos)] for k in policy.observes})
        self.received = 0  # chunk transitions received in the run (by all ranks)
        self.saved_replay: Path | None = None  # the replay folder last saved or resumed from (chunks to reuse)
        self.replay_files: dict[str, int] = {}  # chunk files the last checkpoint wrote and linked
        self.owed = 0.0  # gradient updates owed by the UTD ratio, not yet made (a fraction carries over)

    def policy_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The learner's: it steps the policy."""
        return self.learner.policy_optimizer

    def join(self, ranks: Ranks, rank: int) -> None:
        """The learner's modules start as rank 0's and its updates sum over ``ranks``; this rank samples its own
        replay share with its own streams."""
        self.ranks = ranks
        self.learner.join(ranks)
        stream = self.seed + RANK_SEED_STRIDE * rank  # replay rows, critic subsets and actor noise differ per rank
        self.generator.manual_seed(stream)
        self.learner.generator.manual_seed(stream)

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> tuple[dict[str, float], int]:
        """Add this rank's share of the epoch's transitions to its replay, then make the updates the UTD ratio owes
        for what all ranks received (the same number on every rank); returns metrics of the whole batch."""
        a, ranks = self.algo, ctx.ranks
        gamma, n_step = a.replay_returns()
        with self.busy("replay_insert"):
            local = sum(self.replay.add(t, gamma, n_step, self.learner.replay_actions(t),
                                        a.replay_bootstraps_terminations()) for t in trajectories)
        received, replay_size = (int(v) for v in ranks.sum(torch.tensor([local, len(self.replay)])).tolist())
        behaviour = int(ranks.gather(torch.tensor([min((t.version for t in trajectories), default=ctx.version)]))
                        .min())  # the oldest weights that acted in the epoch, on any rank
        self.received += received
        if replay_size >= max(a.learning_starts, 1):
            self.owed += a.utd_ratio * received
        updates, stats = int(self.owed), {}
        self.owed -= updates
        demo_rows = 0
        for k in range(updates):
            with self.busy("replay_sample"):
                batch = self.sample(iteration)
            demo_rows += batch.demo_rows
            with self.busy("learn"):
                step = self.learner.update(batch)
            if ranks.size > 1:  # the whole batch's means (equal shares), so every rank sees the same numbers
                step = {key: value / ranks.size for key, value in ranks.sum_stats(step).items()}
            bad = non_finite_terms(step)
            if bad:
                raise NonFiniteUpdateError(f"{self.prefix} update {k} of iteration {iteration}: non-finite "
                                           f"{', '.join(f'{n}={step[n]}' for n in bad)}")
            for key, value in step.items():
                stats.setdefault(key, []).append(value)
        metrics = {key: sum(values) / len(values) for key, values in stats.items()}
        version = ctx.version + updates
        pacing = {"updates": float(updates), "updates_total": float(version),
                  "critic_warmup": float(iteration <= a.warmup_iterations()),
                  "transitions_received": float(received), "utd_ratio": version / max(self.received, 1),
                  "staleness": float(ctx.version - behaviour) if trajectories else 0.0}
        metrics |= {f"offpolicy/{key}": value for key, value in pacing.items()}  # the engine's, not the learner's
        metrics["replay/size"] = float(replay_size)
        if self.demos is not None:
            demo_rows = int(ranks.sum(torch.tensor([demo_rows], dtype=torch.float64)).item())
            metrics |= {"replay/demo_share": demo_rows / (updates * a.batch_size) if updates else 0.0,
                        "replay/demo_transitions": float(len(self.demos))}
        return metrics, updates

    def sample(self, iteration: int = 1) -> ReplaySample:
        """This rank's share of one batch for ``iteration``, RLPD's ``demo_ratio`` of it from demonstrations with
        ``demos`` (its ``demo_rows`` first rows)."""
        a = self.algo
        rows = a.batch_size // self.ranks.size  # the config check: a multiple of the ranks
        if self.demos is None:
            batch = self.replay.sample(rows, self.generator)
        else:
            batch, _ = mixed_sample(self.demos, self.replay, rows, a.demo_ratio, self.generator)
        batch.iteration = iteration
        return batch

    def checkpoint_keys(self) -> dict[str, Any]:
        """The learner's state and the pacing counters (replay is saved beside, as files)."""
        return {self.prefix: self.learner.state_dict(),
                f"{self.prefix}_counters": {"received": self.received, "owed": self.owed}}

    def rank_share(self, in_memory: bool) -> dict[str, Any]:
        """This rank's streams and, ``in_memory`` with ``checkpoint_replay``, its replay share."""
        mine: dict[str, Any] = {"generator": self.generator.get_state()}
        if self.ranks.size > 1:
            mine[f"{self.prefix}_generator"] = self.learner.generator.get_state()  # the learner's state: rank 0's
        if in_memory and self.algo.checkpoint_replay:
            mine["replay"] = self.replay.state_dict()
        return mine

    def files(self) -> Callable[[Path, list[dict[str, Any]] | None], None] | None:
        """The replay writer, with ``algorithm.checkpoint_replay``."""
        return self._write_replay if self.algo.checkpoint_replay else None

    def _write_replay(self, folder: Path, shares: list[dict[str, Any]] | None) -> None:
        """The replay into the checkpoint's temp ``folder``: ``replay/`` for one rank, else ``replay/rank_K/`` for
        each rank K (rank 0's own from memory, the others' as ``shares`` sent them)."""
        root = folder / REPLAY_DIR
        if shares is None:
            self.replay_files = self.replay.save(root, previous=self.saved_replay)
            return
        self.replay_files = {"written": 0, "linked": 0}
        for rank, share in enumerate(shares):
            into = rank_replay(root, rank)
            previous = rank_replay(self.saved_replay, rank) if self.saved_replay is not None else None
            counts = (self.replay.save(into, previous) if rank == self.ranks.rank
                      else save_replay(share["replay"], into, previous))
            self.replay_files = {k: n + counts[k] for k, n in self.replay_files.items()}

    def written(self, folder: Path) -> None:
        if self.algo.checkpoint_replay:  # only once the folder is whole: a failed write leaves the last one to reuse
            self.saved_replay = folder / REPLAY_DIR

    def load(self, state: dict[str, Any], mine: dict[str, Any], shares: int) -> None:
        """The learner (under its name), the streams and, if saved, replay (without it replay restarts empty)."""
        if "generator" in mine:
            self.generator.set_state(mine["generator"])
        key = self.prefix if self.prefix in state else None
        if key is not None:
            self.learner.load_state_dict(state[key])
            if f"{key}_generator" in mine:
                self.learner.generator.set_state(mine[f"{key}_generator"])
            counters = state.get(f"{key}_counters", {})
            self.received, self.owed = int(counters.get("received", 0)), float(counters.get("owed", 0.0))
        if "replay_dir" in state:  # a checkpoint's replay/ folder (replay/rank_K/ of several ranks)
            folder = Path(state["replay_dir"])
            self.replay.load(rank_replay(folder, self.ranks.rank) if shares > 1 else folder)
            self.saved_replay = folder
        elif "replay" in mine:  # state() in memory
            self.replay.load_state_dict(mine["replay"])
        elif key is not None:
            warnings.warn("resuming an off-policy run from a checkpoint saved without its replay buffer "
                          "(algorithm.checkpoint_replay=false): replay starts empty, so the resumed run is not exact",
                          stacklevel=2)


def rank_replay(root: Path, rank: int) -> Path:
    """Actor rank ``rank``'s replay share in a checkpoint of several ranks' ``replay/`` folder."""
    return root / f"rank_{rank}"

"""``OffPolicyActorWorker``: the actor of an off-policy algorithm — replay in the actor process, around the
algorithm's learner (``OffPolicyConfig.learner()``, an ``embodied.algorithms.base.OffPolicyLearner``).

Each ``update`` receives the rollout epoch's trajectories (over the same ``trajectories`` channel as PPO),
adds their chunk transitions to a bounded replay buffer (``embodied.replay.buffer``), and makes
``algorithm.utd_ratio`` gradient updates per chunk transition received, once replay holds
``algorithm.learning_starts`` transitions; with ``algorithm.demos`` (RLPD) ``algorithm.demo_ratio`` of every batch
comes from the demonstrations' own replay (``embodied.replay.demos``), built here at start. Fractional ratios
carry over between epochs (``owed``), so the run keeps the ratio exactly. ``version`` counts gradient updates:
the runner syncs weights every ``algorithm.sync_every`` of them (``embodied.runs.offpolicy_iterations``).

With ``actor.num_ranks > 1`` (data parallel, as PPO's ranks): rollout rank r's trajectories reach actor rank
r mod N, so each rank's replay holds its own share; the pacing counts what all ranks received, so every rank
makes the same number of updates; each update draws ``batch_size / N`` rows from every rank's replay and the
gradients are summed over the ranks (``OffPolicyLearner.step``), so the ranks' weights stay identical.

Checkpoints hold the learner's state (``OffPolicyLearner.state_dict``: its networks, optimizers, stream) in trainer.pt
under the learner's own name (``OffPolicyLearner.name``: ``<name>``, ``<name>_counters`` and, per rank,
``<name>_generator``; checkpoints written before learners were plug-ins have the same keys) and, unless
``algorithm.checkpoint_replay`` is off, the replay buffer as chunk files in the checkpoint's ``replay/`` folder
(``ReplayBuffer.save``), in the same atomic write as the policy: a full disk leaves the previous checkpoint as it
was. Chunks unchanged since the checkpoint this actor last wrote or resumed from are hard-linked from it. With
several ranks every rank's share is gathered to rank 0, which writes it as ``replay/rank_K/`` (and each rank's
streams in trainer.pt's ``rank_shares``); on resume each rank loads its own.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from embodied.algorithms.base import OffPolicyLearner, build_learner
from embodied.algorithms.transitions import ReplaySample
from embodied.checkpoint.store import REPLAY_DIR, save_policy_checkpoint
from embodied.config import ActorConfig, OffPolicyConfig
from embodied.core.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.core.types import Trajectory
from embodied.policy.base import PolicyConfig, PolicySpec
from embodied.policy.q_functions import require_q_functions
from embodied.replay.buffer import ReplayBuffer, save_replay
from embodied.replay.demos import demo_replay, fit_demos, mixed_sample, open_demos
from embodied.workers.actor_worker import ActorWorker
from embodied.workers.ranks import ProcessGroup

RANK_SEED_STRIDE = 1_000_003  # rank r's replay and learner streams start from experiment.seed + r * this


class OffPolicyActorWorker(ActorWorker):
    """Replay, the algorithm's learner and the UTD pacing around the policy the ``ActorWorker`` holds."""

    warms_value_head = False  # its critic warm-up trains the learner's critics, not a value head of the policy

    algo: OffPolicyConfig

    def __init__(self, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: OffPolicyConfig, actor: ActorConfig,
                 total_iterations: int, seed: int, torch_threads: int = 1) -> None:
        if algorithm.needs_q_functions:
            require_q_functions(policy_cfg, algorithm.name)
        super().__init__(policy_cfg, spec, algorithm, actor, total_iterations, seed, torch_threads)
        self.learner: OffPolicyLearner = build_learner(algorithm, self.learner_spec, self.policy)
        self.optimizer = self.learner.policy_optimizer  # what the policy checkpoint saves beside the policy
        self.prefix = self.learner.name  # its checkpoint keys and metric names
        self.replay = ReplayBuffer(algorithm.replay_capacity)
        self.demos: ReplayBuffer | None = None  # RLPD: the demonstrations' chunk transitions, built once here
        if algorithm.demos:
            data = open_demos(algorithm.demos, policy_cfg.action_chunk)
            self.demos = demo_replay(data, fit_demos(data, spec, policy_cfg.action_chunk),
                                     *algorithm.replay_returns(), column=self.learner.demo_actions)
            if self.policy.observes:  # merged into those policy.init_from loaded above (unless they are frozen)
                self.policy.observe({k: self.demos.storage[f"obs/{k}"][:len(self.demos)] for k in self.policy.observes})
        self.seed = seed
        self.received = 0  # chunk transitions received in the run (by all ranks)
        self.saved_replay: Path | None = None  # the replay folder last saved or resumed from (chunks to reuse)
        self.replay_files: dict[str, int] = {}  # chunk files the last checkpoint wrote and linked
        self.owed = 0.0  # gradient updates owed by the UTD ratio, not yet made (a fraction carries over)

    def _build_algorithm(self) -> None:
        """None: the learner (built once the policy is) trains, not an on-policy algorithm."""
        return None

    def _new_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """A stand-in until the learner is built: the policy's optimizer is then the learner's actor optimizer."""
        return torch.optim.Adam(params, lr=self.cfg.lr)

    def join_group(self, rank: int, size: int, address: str) -> None:
        """Become rank ``rank`` of ``size`` (``ActorWorker.join_group``, data parallel): the policy (its feature
        encoder included) and the learner's ``rank_modules`` start as rank 0's, and this rank samples its own
        replay share with its own streams. The optimizers stay the learner's (the tensors are the
        same objects, now equal on every rank)."""
        self.ranks = ProcessGroup(rank, size, address, self.cfg.dist_backend, self.cfg.strategy)
        learner = self.learner
        self.ranks.prepare(self.policy)
        for module in learner.rank_modules():  # a target copy of the policy's encoder: this rank's own one until now
            self.ranks.prepare(module)
        stream = self.seed + RANK_SEED_STRIDE * rank  # replay rows, critic subsets and actor noise differ per rank
        self.generator.manual_seed(stream)
        learner.generator.manual_seed(stream)

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """Add this rank's share of the epoch's transitions to its replay, then make the updates the UTD ratio owes
        for what all ranks received (the same number on every rank); returns metrics of the whole batch."""
        a, ranks = self.algo, self.ranks
        gamma, n_step = a.replay_returns()
        local = sum(self.replay.add(t, gamma, n_step, self.learner.replay_actions(t)) for t in trajectories)
        received, replay_size = (int(v) for v in ranks.sum(torch.tensor([local, len(self.replay)])).tolist())
        behaviour = int(ranks.gather(torch.tensor([min((t.version for t in trajectories), default=self.version)]))
                        .min())  # the oldest weights that acted in the epoch, on any rank
        self.received += received
        if replay_size >= max(a.learning_starts, 1):
            self.owed += a.utd_ratio * received
        updates, stats = int(self.owed), {}
        self.owed -= updates
        demo_rows = 0
        warmup = iteration <= a.warmup_iterations()  # after an SFT start: critics first, the actor still
        for k in range(updates):
            batch, from_demos = self.sample()
            demo_rows += from_demos
            step = self.learner.step(batch, ranks if ranks.size > 1 else None, train_policy=not warmup,
                                     demo_rows=from_demos)
            if ranks.size > 1:  # the whole batch's means (equal shares), so every rank sees the same numbers
                step = {key: value / ranks.size for key, value in ranks.sum_stats(step).items()}
            bad = non_finite_terms(step)
            if bad:
                raise NonFiniteUpdateError(f"{self.prefix} update {k} of iteration {iteration}: non-finite "
                                           f"{', '.join(f'{n}={step[n]}' for n in bad)}")
            for key, value in step.items():
                stats.setdefault(key, []).append(value)
        self.version += updates
        if self.policy.observes and trajectories:  # as PPO's actor: the epoch's inputs, after its updates
            self._observe({k: torch.cat([t.forward_inputs[k].flatten(0, 1) for t in trajectories])
                           for k in self.policy.observes})
        metrics = {key: sum(values) / len(values) for key, values in stats.items()}
        pacing = {"updates": float(updates), "updates_total": float(self.version), "critic_warmup": float(warmup),
                  "transitions_received": float(received), "utd_ratio": self.version / max(self.received, 1),
                  "staleness": float(self.version - updates - behaviour) if trajectories else 0.0}
        metrics |= {f"offpolicy/{key}": value for key, value in pacing.items()}  # the engine's, not the learner's
        metrics["replay/size"] = float(replay_size)
        if self.demos is not None:
            demo_rows = int(ranks.sum(torch.tensor([demo_rows], dtype=torch.float64)).item())
            metrics |= {"replay/demo_share": demo_rows / (updates * a.batch_size) if updates else 0.0,
                        "replay/demo_transitions": float(len(self.demos))}
        return metrics

    def sample(self) -> tuple[ReplaySample, int]:
        """This rank's share of one batch and how many of its rows are demonstrations (RLPD's ``demo_ratio`` of it
        with ``demos``)."""
        a = self.algo
        rows = a.batch_size // self.ranks.size  # the config check: a multiple of the ranks
        if self.demos is None:
            return self.replay.sample(rows, self.generator), 0
        return mixed_sample(self.demos, self.replay, rows, a.demo_ratio, self.generator)

    def _extra(self) -> dict[str, Any]:
        """The learner's state and pacing counters for the checkpoint's ``actor`` entry (replay is saved beside)."""
        return {self.prefix: self.learner.state_dict(),
                f"{self.prefix}_counters": {"received": self.received, "owed": self.owed}}

    def _mine(self, replay: bool) -> dict[str, Any]:
        """This rank's own part of the state: its streams and, with ``replay``, its replay share in memory."""
        mine: dict[str, Any] = {"generator": self.generator.get_state()}
        if self.ranks.size > 1:
            mine[f"{self.prefix}_generator"] = self.learner.generator.get_state()  # the learner's state: rank 0's
        if replay:
            mine["replay"] = self.replay.state_dict()
        return mine

    def state(self) -> dict[str, Any]:
        """The actor's whole state in memory, replay included unless ``algorithm.checkpoint_replay`` is off. With
        several ranks every rank takes part: each rank's streams and replay share, as ``rank_shares``."""
        mine = self._mine(self.algo.checkpoint_replay)
        own = mine if self.ranks.size == 1 else {"rank_shares": self.ranks.gather_objects(mine)}
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version,
                **self._extra(), **own}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """The checkpoint folder ``path``, written by rank 0: trainer.pt and, with ``checkpoint_replay``, the
        replay beside it in ``replay/``; with several ranks (a collective every rank joins) each rank's streams
        go into trainer.pt's ``rank_shares`` and its replay share into ``replay/rank_K/``."""
        folder, ranks = Path(path), self.ranks
        replay = self.algo.checkpoint_replay
        if ranks.size == 1:
            shares, actor_extra = None, self._extra() | self._mine(replay=False)
        else:  # rank 0 writes its own replay from memory; the others send theirs
            shares = ranks.gather_to_main(self._mine(replay=replay and not ranks.is_main))
            if shares is None:
                return path
            actor_extra = self._extra() | {"rank_shares": [{k: v for k, v in share.items() if k != "replay"}
                                                           for share in shares]}
        write = (lambda tmp: self._write_replay(tmp, shares)) if replay else None
        save_policy_checkpoint(folder, self.policy, self.optimizer, self.version, self.spec, extra, actor_extra,
                               write)
        if write is not None:  # only once the folder is whole: a failed write leaves the last one to reuse
            self.saved_replay = folder / REPLAY_DIR
        return path

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

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume the policy, the learner and, if saved, replay (without it replay restarts empty). With several
        ranks, each takes its own share of a checkpoint saved by as many ranks."""
        shares = state.get("rank_shares") or [state]
        if len(shares) != self.ranks.size and ("replay" in shares[0] or "replay_dir" in state):
            raise ValueError(f"runner.resume_from: the checkpoint's replay was saved by {len(shares)} actor rank(s), "
                             f"each holding its own share; resume it with actor.num_ranks={len(shares)} (this run "
                             f"has {self.ranks.size})")
        mine = shares[self.ranks.rank] if len(shares) == self.ranks.size else shares[0]
        self._load_policy(self.policy, state)
        if "optimizer" in state:  # the learner's policy optimizer: a learner that keeps no copy of its own needs it
            self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        if "generator" in mine:
            self.generator.set_state(mine["generator"])
        key = next((k for k in (self.prefix, *getattr(self.learner, "checkpoint_aliases", ())) if k in state), None)
        if key is not None:  # the learner's own name, or the one an older checkpoint saved it under
            self.learner.load_state_dict(state[key])
            if f"{key}_generator" in mine:
                self.learner.generator.set_state(mine[f"{key}_generator"])
            counters = state.get(f"{key}_counters", {})
            self.received, self.owed = int(counters.get("received", 0)), float(counters.get("owed", 0.0))
        if "replay_dir" in state:  # a checkpoint's replay/ folder (replay/rank_K/ of several ranks)
            folder = Path(state["replay_dir"])
            self.replay.load(rank_replay(folder, self.ranks.rank) if len(shares) > 1 else folder)
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

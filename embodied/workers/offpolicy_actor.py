"""``OffPolicyActorWorker``: the actor of an off-policy algorithm (SAC) — replay in the actor process.

Each ``update`` receives the rollout epoch's trajectories (over the same ``trajectories`` channel as PPO),
adds their chunk transitions to a bounded replay buffer (``embodied.replay``), and makes
``algorithm.utd_ratio`` gradient updates per chunk transition received, once replay holds
``algorithm.learning_starts`` transitions; with ``algorithm.demos`` (RLPD) ``algorithm.demo_ratio`` of every batch
comes from the demonstrations' own replay (``embodied.demo_replay``), built here at start. Fractional ratios carry over between epochs (``owed``), so the
run keeps the ratio exactly. ``version`` counts gradient updates: the runner syncs weights every
``algorithm.sync_every`` of them (``embodied.offpolicy_runner``).

Checkpoints hold the learner (critics, targets, temperature, optimizers) in trainer.pt and, unless
``algorithm.checkpoint_replay`` is off, the replay buffer as chunk files in the checkpoint's ``replay/`` folder
(``ReplayBuffer.save``), in the same atomic write as the policy: a full disk leaves the previous checkpoint as it
was. Chunks unchanged since the checkpoint this actor last wrote or resumed from are hard-linked from it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from embodied.algorithms.sac import ReplaySample, SACLearner
from embodied.checkpoint import REPLAY_DIR, save_policy_checkpoint
from embodied.config import ActorConfig, AlgorithmConfig
from embodied.demo_replay import demo_replay, fit_demos, mixed_sample, open_demos
from embodied.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.policy import PolicyConfig, PolicySpec
from embodied.q_functions import require_q_functions
from embodied.replay import ReplayBuffer
from embodied.types import Trajectory
from embodied.workers.actor_worker import ActorWorker


class OffPolicyActorWorker(ActorWorker):
    """Replay, the SAC learner and the UTD pacing around the policy the ``ActorWorker`` holds."""

    def __init__(self, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: AlgorithmConfig, actor: ActorConfig,
                 total_iterations: int, seed: int, torch_threads: int = 1) -> None:
        require_q_functions(policy_cfg, algorithm.name)
        super().__init__(policy_cfg, spec, algorithm, actor, total_iterations, seed, torch_threads)
        self.learner = SACLearner(self.policy, algorithm, actor.lr, policy_cfg.action_chunk * spec.action_dim, seed)
        self.optimizer = self.learner.actor_optimizer  # what the policy checkpoint saves beside the policy
        self.replay = ReplayBuffer(algorithm.replay_capacity)
        self.demos: ReplayBuffer | None = None  # RLPD: the demonstrations' chunk transitions, built once here
        if algorithm.demos:
            data = open_demos(algorithm.demos, policy_cfg.action_chunk)
            self.demos = demo_replay(data, fit_demos(data, spec, policy_cfg.action_chunk), algorithm.gamma,
                                     algorithm.n_step)
        self.received = 0  # chunk transitions received in the run
        self.saved_replay: Path | None = None  # the replay folder last saved or resumed from (chunks to reuse)
        self.replay_files: dict[str, int] = {}  # chunk files the last checkpoint wrote and linked
        self.owed = 0.0  # gradient updates owed by the UTD ratio, not yet made (a fraction carries over)

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """Add the epoch's transitions to replay, then make the updates the UTD ratio owes; returns metrics."""
        a = self.algo
        received = sum(self.replay.add(t, a.gamma, a.n_step, self.policy.replay_actions(t.forward_inputs, t.actions))
                       for t in trajectories)
        self.received += received
        behaviour = [t.version for t in trajectories]
        if len(self.replay) >= max(a.learning_starts, 1):
            self.owed += a.utd_ratio * received
        updates, stats = int(self.owed), {}
        self.owed -= updates
        demo_rows = 0
        for k in range(updates):
            batch, from_demos = self.sample()
            demo_rows += from_demos
            step = self.learner.step(batch)
            bad = non_finite_terms(step)
            if bad:
                raise NonFiniteUpdateError(f"sac update {k} of iteration {iteration}: non-finite "
                                           f"{', '.join(f'{n}={step[n]}' for n in bad)}")
            for key, value in step.items():
                stats.setdefault(key, []).append(value)
        self.version += updates
        metrics = {key: sum(values) / len(values) for key, values in stats.items()}
        metrics |= {"sac/updates": float(updates), "sac/updates_total": float(self.version),
                    "sac/transitions_received": float(received), "replay/size": float(len(self.replay)),
                    "sac/staleness": float(self.version - updates - min(behaviour)) if behaviour else 0.0}
        if self.demos is not None:
            metrics |= {"rlpd/demo_share": demo_rows / (updates * a.batch_size) if updates else 0.0,
                        "rlpd/demo_transitions": float(len(self.demos))}
        return metrics

    def sample(self) -> tuple[ReplaySample, int]:
        """One batch and how many of its rows are demonstrations (RLPD's ``demo_ratio`` of it with ``demos``)."""
        a = self.algo
        if self.demos is None:
            return self.replay.sample(a.batch_size, self.generator), 0
        return mixed_sample(self.demos, self.replay, a.batch_size, a.demo_ratio, self.generator)

    def _extra(self) -> dict[str, Any]:
        """The learner's state and pacing counters for the checkpoint's ``actor`` entry (replay is saved beside)."""
        return {"generator": self.generator.get_state(), "sac": self.learner.state_dict(),
                "sac_counters": {"received": self.received, "owed": self.owed}}

    def state(self) -> dict[str, Any]:
        """The actor's whole state in memory, replay included unless ``algorithm.checkpoint_replay`` is off."""
        replay = {"replay": self.replay.state_dict()} if self.algo.checkpoint_replay else {}
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version,
                **self._extra(), **replay}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """The checkpoint folder ``path``: trainer.pt and, with ``checkpoint_replay``, ``replay/`` beside it."""
        folder = Path(path)
        write = self._write_replay if self.algo.checkpoint_replay else None
        save_policy_checkpoint(folder, self.policy, self.optimizer, self.version, self.spec, extra, self._extra(),
                               write)
        if write is not None:  # only once the folder is whole: a failed write leaves the last one to reuse
            self.saved_replay = folder / REPLAY_DIR
        return path

    def _write_replay(self, folder: Path) -> None:
        self.replay_files = self.replay.save(folder / REPLAY_DIR, previous=self.saved_replay)

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume the policy, the learner and, if saved, replay (without it replay restarts empty)."""
        self._load_policy(self.policy, state)
        self.version = int(state["version"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        if "sac" in state:
            self.learner.load_state_dict(state["sac"])
            counters = state.get("sac_counters", {})
            self.received, self.owed = int(counters.get("received", 0)), float(counters.get("owed", 0.0))
        if "replay_dir" in state:  # a checkpoint's replay/ folder
            self.replay.load(Path(state["replay_dir"]))
            self.saved_replay = Path(state["replay_dir"])
        elif "replay" in state:  # state() in memory
            self.replay.load_state_dict(state["replay"])
        elif "sac" in state:
            warnings.warn("resuming SAC from a checkpoint saved without its replay buffer "
                          "(algorithm.checkpoint_replay=false): replay starts empty, so the resumed run is not exact",
                          stacklevel=2)


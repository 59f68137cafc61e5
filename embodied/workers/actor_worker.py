"""``ActorWorker``: holds the trained policy, hands each rollout's trajectories to the algorithm's training and
publishes versioned weights; one worker for both families.

The training is the family's part (``embodied.workers.training``): an on-policy learner's update over the
trajectories (``OnPolicyTraining``: advantages, epochs, minibatches, the learning rate are the learner's), or replay,
the UTD pacing and an off-policy learner (``embodied.workers.replay_training.ReplayTraining``). The worker owns
what is the policy's whatever the algorithm: its optimizer, the ranks, weight sync, the weight average and
checkpoint I/O, and never publishes weights an update left non-finite.

One worker is one rank. With ``actor.num_ranks > 1`` the ranks join one process group (``join_group``,
``embodied.workers.ranks``): each gets its own share of the trajectories, takes its share of every
minibatch, and the gradients are summed, so the ranks step as one rank would on the whole batch (the learner
computes through ``UpdateContext.ranks``). ``actor.grad_accumulation_steps`` splits each rank's share again into
micro-batches, one backward each.

``actor.ema_decay`` keeps an exponential moving average of the trained parameters, stepped after every
optimizer step. The live weights act in rollouts and train; the average is what evals act with
(``use_average``) and what a checkpoint's policy holds, the live weights riding along as ``live_policy``
so a resumed run trains on exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import torch

from embodied.algorithms.base import LearnerSpec, UpdateContext
from embodied.channels import Channel
from embodied.checkpoint.migrate import migrate_actor
from embodied.checkpoint.store import load_init_from, load_policy_state, non_finite_tensors, save_policy_checkpoint
from embodied.config import ActorConfig, AlgorithmConfig
from embodied.core.numerics import NonFiniteUpdateError
from embodied.core.types import Trajectory
from embodied.policy.base import Policy, PolicyConfig, PolicySpec, build_policy
from embodied.workers.ranks import ProcessGroup, Ranks, rendezvous_address
from embodied.workers.training import WORKER_KEYS, Training, new_training


# The trajectories are sent when the update is asked for: they arrive within seconds; a worker that died on the
# way is reported by the driver long before this.
TRAJECTORY_TIMEOUT_S = 600.0
__all__ = ["WORKER_KEYS", "ActorWorker"]


class ActorWorker:
    """Holds the trained policy, its optimizer and the family's ``training``; ``version`` counts weight versions
    (an on-policy update, or an off-policy gradient update)."""

    # Answered beside the worker's own calls (an async run's driver asks while epochs run): its timings.
    concurrent_methods: ClassVar[tuple[str, ...]] = ("take_busy",)

    def __init__(self, policy_cfg: PolicyConfig, spec: PolicySpec, algorithm: AlgorithmConfig, actor: ActorConfig,
                 total_iterations: int, seed: int, torch_threads: int = 1) -> None:
        torch.set_num_threads(torch_threads)
        torch.manual_seed(seed)
        self.algo, self.cfg, self.total_iterations, self.spec = algorithm, actor, total_iterations, spec
        self.policy_cfg = policy_cfg
        self.ranks: Ranks = Ranks()
        self.seed = seed
        self.policy: Policy = build_policy(policy_cfg, spec)
        if policy_cfg.init_from:  # e.g. an SFT checkpoint; the driver checked its type and chunk already
            load_init_from(self.policy, policy_cfg.init_from, spec.action_dim)
        # Once per run (the actor is the one copy that trains), after init_from: what it loaded (normalization
        # statistics, say) is what the run uses.
        print(self.policy.describe(), flush=True)
        device = next((p.device for p in self.policy.parameters()), torch.device("cpu"))
        # What the learner is built with (build_learner), for both families.
        self.learner_spec = LearnerSpec(spec, policy_cfg.action_chunk, seed, algorithm.lr, total_iterations,
                                        actor.num_ranks, device)
        self.training: Training = new_training(self.policy, policy_cfg, spec, algorithm, self.learner_spec, seed)
        self._build_optimizer()
        self.version = 0
        self._live: dict[str, torch.Tensor] | None = None  # the live weights while the policy holds the average

    def take_busy(self) -> dict[str, float]:
        """Seconds of its updates per activity (the learner's steps; off-policy also replay inserts and samples)
        since the last call (``embodied.core.timing``)."""
        return self.training.busy.take()

    @property
    def learner(self) -> Any:
        """The algorithm's learner (the training's)."""
        return self.training.learner

    def _build_optimizer(self) -> None:
        # Only what trains: a LoRA-wrapped backbone's frozen weights get no optimizer state.
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = self.training.policy_optimizer(self.params)
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.value_head = {id(p) for name, p in self.policy.named_parameters() if name in self.training.value_names}
        self._reset_average()

    # -- the moving average (actor.ema_decay) ------------------------------------------------------

    def _trained(self) -> dict[str, torch.nn.Parameter]:
        return {name: p for name, p in self.policy.named_parameters() if p.requires_grad}

    def _reset_average(self) -> None:
        """The average starts at the weights the policy holds now (float32, whatever the policy's dtype)."""
        self.ema: dict[str, torch.Tensor] | None = None
        if self.cfg.ema_decay > 0:
            self.ema = {name: p.detach().float().clone() for name, p in self._trained().items()}

    @torch.no_grad()
    def _step_average(self) -> None:
        if self.ema is not None:
            for name, p in self._trained().items():
                self.ema[name].lerp_(p.detach().float(), 1.0 - self.cfg.ema_decay)

    @torch.no_grad()
    def use_average(self, on: bool) -> None:
        """Put the average into the policy (``on``), or the live weights back. Evals and checkpoints run between
        the two calls; weights published meanwhile are the average. A no-op without ``actor.ema_decay``."""
        if self.ema is None or on == (self._live is not None):
            return
        trained = self._trained()
        if on:
            self._live = {name: p.detach().clone() for name, p in trained.items()}
        source = self.ema if on else self._live
        assert source is not None
        for name, p in trained.items():
            p.copy_(source[name])
        if not on:
            self._live = None

    @contextmanager
    def _averaged(self) -> Iterator[dict[str, torch.Tensor]]:
        """The policy holds the average inside; yields the live trained weights ({} without an average)."""
        was_on = self._live is not None
        self.use_average(True)
        try:
            yield dict(self._live or {})  # already a copy, and use_average(False) only lets go of it
        finally:
            self.use_average(was_on)

    def _load_policy(self, policy: Policy, state: dict[str, Any]) -> None:
        """A checkpoint's policy into ``policy``: its saved weights (the average, if its run kept one), then the live
        weights its run trained on (``live_policy``), if any."""
        load_policy_state(policy, state)
        if self.cfg.ema_decay > 0 and policy is self.policy:
            self._reset_average()
        if state.get("live_policy"):
            _, unexpected = policy.load_state_dict(state["live_policy"], strict=False)
            if unexpected:
                raise ValueError(f"the checkpoint's live_policy names parameters this policy lacks: {unexpected[:5]}")

    # -- ranks -----------------------------------------------------------------------------------

    def rendezvous(self) -> str:
        """``host:port`` where the process group meets (asked of rank 0, on its node)."""
        return rendezvous_address()

    def join_group(self, rank: int, size: int, address: str) -> None:
        """Become rank ``rank`` of ``size``: join the process group at ``address``, make the ranks' policies one
        (rank 0's weights broadcast, or the policy sharded), build the optimizer over what this rank holds (where
        the training's is not the learner's own) and let the training join."""
        self.ranks = ProcessGroup(rank, size, address, self.cfg.dist_backend, self.cfg.strategy)
        self.ranks.prepare(self.policy)
        if self.training.rebuilds_optimizer:
            self._build_optimizer()
        self.training.join(self.ranks, rank)

    def weights(self, shared: bool = False) -> tuple[int, dict[str, torch.Tensor] | None]:
        """``(version, trainable state)`` for rollout workers; ``shared`` sends no tensors (colocated).

        Only trainable parameters and buffers travel (``Policy.trainable_state``): frozen weights
        are the same on every copy, so a LoRA policy sends its adapters, not its backbone.
        """
        if shared:
            return self.version, None
        state = self.ranks.full(self.policy.trainable_state())  # a collective under fsdp: every rank is asked
        if not self.ranks.is_main:
            return self.version, None  # rank 0 answers for the group
        return self.version, {k: v.detach().cpu().clone() for k, v in state.items()}

    def update_from(self, inbox: Channel, sources: int, iteration: int) -> dict[str, float]:
        """``update`` on the trajectories of the ``sources`` rollout ranks that send to this rank (key
        ``actor<rank>`` of ``inbox``), concatenated in rollout-rank order whatever order they arrive in."""
        items = [inbox.get(f"actor{self.ranks.rank}", timeout=TRAJECTORY_TIMEOUT_S) for _ in range(sources)]
        return self.update([trajectory for _, trajectory in sorted(items, key=lambda item: item[0])], iteration)

    def update(self, trajectories: list[Trajectory], iteration: int) -> dict[str, float]:
        """The training's update on this rank's ``trajectories``; returns the whole batch's train metrics. Then the
        policy's input statistics take in the epoch's inputs and ``version`` counts the weight versions made."""
        if self._live is not None:
            raise RuntimeError("update while the policy holds the weight average (use_average(False) first)")
        metrics, versions = self.training.update(trajectories, iteration, self._context())
        bad = non_finite_tensors({n: _local(p) for n, p in self.policy.named_parameters()})
        if self.ranks.sum(torch.tensor([float(bool(bad))])) > 0:  # finite gradients can still overflow a weight
            bad = bad or ["on another actor rank"]  # never publish or checkpoint it, and every rank stops
            raise NonFiniteUpdateError(f"update at iteration {iteration} left non-finite weights ({', '.join(bad)})")
        if trajectories:  # the env axis joined as Trajectory.concat joins it, chunk steps flattened as a batch is
            self._observe({k: torch.cat([t.forward_inputs[k] for t in trajectories], 1).flatten(0, 1)
                           for k in self.policy.observes})
        self.version += versions
        return metrics

    def _context(self) -> UpdateContext:
        """What the learner is lent for one update."""
        return UpdateContext(policy=self.policy, optimizer=self.optimizer, params=self.params,
                             value_head=frozenset(self.value_head), device=self.device, ranks=self.ranks,
                             micro_batches=self.cfg.grad_accumulation_steps, version=self.version, lr=self.algo.lr,
                             total_iterations=self.total_iterations, after_step=self._step_average)

    def _observe(self, forward_inputs: dict[str, torch.Tensor]) -> None:
        """Input statistics from the whole batch: with several ranks, the inputs ``Policy.observes`` names are
        gathered from all of them first, so every rank's statistics stay the same."""
        if self.ranks.size == 1:
            self.policy.observe(forward_inputs)
            return
        self.policy.observe({k: self.ranks.gather(forward_inputs[k]) for k in self.policy.observes})

    def _shares(self, in_memory: bool) -> dict[str, Any]:
        """The ranks' own parts of the training's state (streams, replay shares): this rank's alone, or every
        rank's as ``rank_shares`` (a collective every rank joins); ``{}`` where the ranks hold the same."""
        mine = self.training.rank_share(in_memory)
        if not mine:
            return {}
        return mine if self.ranks.size == 1 else {"rank_shares": self.ranks.gather_objects(mine)}

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint needs to resume the actor (rank 0's answer; every rank is asked under fsdp and
        where the ranks hold shares of their own).

        A policy that exports itself (``exports_pretrained``) is saved as a folder by
        ``save_checkpoint``; its trainable state is here only for comparisons in memory.
        """
        own = self._shares(in_memory=True)
        with self._averaged() as live:
            policy, optimizer = self._whole()
            if policy is None:
                return {}  # fsdp: rank 0 answers for the group
            weights = policy.trainable_state() if policy.exports_pretrained else policy.state_dict()
            if live:  # state dicts share the parameters' storage, which the live weights overwrite on the way out
                weights = {name: t.clone() for name, t in weights.items()}
        return {"policy": weights, "optimizer": optimizer.state_dict(), "version": self.version,
                **self.training.checkpoint_keys(), **own, **({"live_policy": live} if live else {})}

    def save_checkpoint(self, path: str, extra: dict[str, Any]) -> str:
        """Write a checkpoint folder (``embodied.checkpoint.store``) from rank 0, in the one-process format whatever the
        number of ranks (so it resumes into any number, and transformers opens an exported policy alone). The
        training's files (replay) go into the same atomic write; the ranks' own parts are gathered to rank 0
        (a collective every rank joins), which writes each rank's streams into ``rank_shares``."""
        folder, ranks = Path(path), self.ranks
        files, mine = self.training.files(), self.training.rank_share(in_memory=False)
        shares = None
        if ranks.size > 1 and mine:  # rank 0 writes its own replay from memory; the others send theirs
            shares = ranks.gather_to_main(self.training.rank_share(in_memory=not ranks.is_main))
        with self._averaged() as live:  # policy/ holds the average: what evals measured and init_from reads
            policy, optimizer = self._whole()
            if policy is None or not ranks.is_main:
                return path
            own = mine if ranks.size == 1 else (
                {"rank_shares": [{k: v for k, v in share.items() if k != "replay"} for share in shares]}
                if shares is not None else {})
            actor_extra = {**self.training.checkpoint_keys(), **own, **({"live_policy": live} if live else {})}
            write = (lambda tmp: files(tmp, shares)) if files is not None else None
            save_policy_checkpoint(folder, policy, optimizer, self.version, self.spec, extra, actor_extra, write)
        self.training.written(folder)  # only once the folder is whole: a failed write leaves the last one to reuse
        return path

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume from ``state()`` (or a checkpoint's ``actor``), saved with any number of ranks; each rank takes
        its own share of the training's state where the ranks kept shares of their own."""
        migrate_actor(state, type(self.algo).checkpoint_moves)  # an older entry in today's form
        shares = state.get("rank_shares") or [state]
        if len(shares) != self.ranks.size and ("replay" in shares[0] or "replay_dir" in state):
            raise ValueError(f"runner.resume_from: the checkpoint's replay was saved by {len(shares)} actor rank(s), "
                             f"each holding its own share; resume it with actor.num_ranks={len(shares)} (this run "
                             f"has {self.ranks.size})")
        if self.ranks.strategy == "fsdp" and self.ranks.size > 1:
            self._load_sharded(state)
        else:
            self._load_policy(self.policy, state)
            if "optimizer" in state:  # (every checkpoint written by the engine holds it)
                self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        mine = shares[self.ranks.rank] if len(shares) == self.ranks.size else shares[0]
        self.training.load(state, mine, len(shares))

    # -- fsdp: the sharded policy as one module ----------------------------------------------------

    def _whole(self) -> tuple[Policy, torch.optim.Optimizer] | tuple[None, None]:
        """The policy and optimizer whole: themselves, or under fsdp an unsharded twin built on rank 0 from the
        gathered shards (every rank takes part in the gather; the other ranks get None)."""
        if self.ranks.strategy != "fsdp" or self.ranks.size == 1:
            return self.policy, self.optimizer
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict, set_optimizer_state_dict)

        # Only what trains is gathered: frozen weights (a LoRA backbone's) are the config's, which the twin has.
        whole = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        weights = get_model_state_dict(self.policy, options=whole)
        optim = get_optimizer_state_dict(self.policy, self.optimizer, options=whole)
        if not self.ranks.is_main:
            return None, None
        twin, twin_optimizer = self._twin()
        missing, unexpected = twin.load_state_dict(weights, strict=False)
        frozen = {name for name, p in twin.named_parameters() if not p.requires_grad}
        if unexpected or set(missing) - frozen:
            raise RuntimeError(f"fsdp: the gathered state does not fit the policy (missing "
                               f"{sorted(set(missing) - frozen)[:5]}, unexpected {unexpected[:5]})")
        set_optimizer_state_dict(twin, twin_optimizer, optim, options=StateDictOptions(full_state_dict=True))
        return twin, twin_optimizer

    def _twin(self) -> tuple[Policy, torch.optim.Optimizer]:
        """An unsharded CPU policy of the same config and its optimizer (same parameter order as the actor's)."""
        twin = build_policy(self.policy_cfg, self.spec)
        params = [p for p in twin.parameters() if p.requires_grad]
        return twin, self.training.policy_optimizer(params)

    def _load_sharded(self, state: dict[str, Any]) -> None:
        """A one-process checkpoint into the sharded policy: loaded whole into a twin, then scattered."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                             set_model_state_dict, set_optimizer_state_dict)

        twin, twin_optimizer = self._twin()
        self._load_policy(twin, state)
        twin_optimizer.load_state_dict(state["optimizer"])
        whole = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.policy, twin.state_dict(), options=whole)
        set_optimizer_state_dict(self.policy, self.optimizer, get_optimizer_state_dict(twin, twin_optimizer),
                                 options=whole)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded (DTensor) parameter, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t

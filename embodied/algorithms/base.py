"""What the actor asks of a training algorithm (``algorithm.name``, whose config class names it): two protocols.

``OnPolicyLearner`` is trained by ``ActorWorker``: it owns the whole update over one rollout's trajectories (its
advantages, epochs, minibatches, early stop and learning-rate schedule), given what the worker lends it for the
update (``UpdateContext``: the policy, its optimizer, the actor ranks' collectives, a hook after each optimizer
step). How the envs start each rollout epoch is its config's (``OnPolicyConfig.rollout_reset``), as GRPO resets a
group of envs from one seed. ``OffPolicyLearner`` is updated on replay batches by
the same worker's replay training (``embodied.workers.replay_training``). The maths lives in pure functions beside each algorithm (``gae.py``, ``ppo.py``,
``grpo.py``, ``sac.py``, ``transitions.py``); PPO's learner (``ppo.PPO``) is the on-policy loop GRPO reuses.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch

from embodied.config.algorithm import RolloutReset
from embodied.core.types import Trajectory
from embodied.policy.config import PolicySpec

if TYPE_CHECKING:
    from embodied.config.algorithm import AlgorithmConfig
    from embodied.policy.base import Policy


@dataclass(frozen=True)
class LearnerSpec:
    """The run as a learner sees it when it is built (``build_learner``), the same for both families: what the
    policy observes and emits (with the action bounds), how many actions a chunk holds, where the policy computes,
    how many actor ranks share the batch, and the run's seed and learning rate.

    A learner learns its own rank when the ranks join (``OffPolicyLearner.join``, the worker reseeds its
    ``generator``); ``num_ranks`` is how many there will be."""

    policy: PolicySpec  # state_dim, image shapes, action_dim and the action box of one env step
    action_chunk: int  # C: actions a chunk holds (policy.action_chunk)
    seed: int  # experiment.seed: the learner's own random stream starts here
    lr: float  # algorithm.lr
    total_iterations: int  # runner.iterations (a schedule decays over them)
    num_ranks: int = 1  # actor.num_ranks
    device: torch.device = torch.device("cpu")  # where the policy computes

    @property
    def action_size(self) -> int:
        """C * A: the numbers of one action chunk."""
        return self.action_chunk * self.policy.action_dim

    @property
    def action_space(self) -> gym.spaces.Box:
        """One chunk's space [C, A], each action within the env's bounds."""
        low = np.tile(np.asarray(self.policy.action_low, dtype=np.float32), (self.action_chunk, 1))
        high = np.tile(np.asarray(self.policy.action_high, dtype=np.float32), (self.action_chunk, 1))
        return gym.spaces.Box(low, high, dtype=np.float32)

    @property
    def observation_space(self) -> gym.spaces.Dict:
        """What the policy is given: ``states`` [S] (when S > 0), ``main_images`` and ``wrist_images`` (uint8,
        when the env renders them)."""
        spaces: dict[str, gym.spaces.Space] = {}
        if self.policy.state_dim:
            spaces["states"] = gym.spaces.Box(-np.inf, np.inf, (self.policy.state_dim,), np.float32)
        for key, shape in (("main_images", self.policy.image_shape), ("wrist_images", self.policy.wrist_image_shape)):
            if shape is not None:
                spaces[key] = gym.spaces.Box(0, 255, tuple(shape), np.uint8)
        return gym.spaces.Dict(spaces)


def build_learner(cfg: AlgorithmConfig, spec: LearnerSpec, policy: Policy | None = None) -> Any:
    """The one constructor of a learner, for both families: ``cls(cfg, spec)`` for an ``OnPolicyLearner``,
    ``cls(policy, cfg, spec)`` for an ``OffPolicyLearner`` (``policy``: the trained one, what it builds around),
    where ``cls`` is the class ``algorithm.name``'s config names.

    A learner written to the constructors of before (``(cfg, seed)``; ``(policy, cfg, lr, action_size, seed)``)
    is built through an adapter for this release, with one FutureWarning naming the new constructor; so is an
    off-policy learner that still steps (``step(batch, ranks, train_policy, demo_rows)``: ``StepLearner``)."""
    cls = cfg.algorithm_type()
    if cfg.off_policy:
        if policy is None:
            raise TypeError(f"build_learner: {cls.__name__} is an off-policy learner; it is built around the policy")
        if _legacy(cls, ("lr", "action_size", "seed")):
            learner = cls(policy, cfg, spec.lr, spec.action_size, spec.seed)
        else:
            learner = cls(policy, cfg, spec)
        return StepLearner(learner, cfg) if _steps(cls) else learner
    if _legacy(cls, ("seed",)):
        return cls(cfg, spec.seed)
    return cls(cfg, spec)


_WARNED: set[Any] = set()  # classes (and (class, "step")) warned about once


def _legacy(cls: type, old: tuple[str, ...]) -> bool:
    """Whether ``cls.__init__`` takes the old constructor's arguments (named ``old``) and no ``spec``; warns once
    per class."""
    names = set(inspect.signature(cls.__init__).parameters)
    if "spec" in names or not set(old) <= names:
        return False
    if cls not in _WARNED:
        _WARNED.add(cls)
        now = "(policy, cfg, spec)" if "lr" in old else "(cfg, spec)"
        warnings.warn(f"{cls.__module__}.{cls.__qualname__}.__init__ takes ({', '.join(old)}): the learner "
                      f"constructor of before LearnerSpec. It is built through an adapter for this release; take "
                      f"{now} instead, spec an embodied.api.LearnerSpec (docs/extending.md, \"The learner's "
                      f"constructor\")", FutureWarning, stacklevel=3)
    return True


def _steps(cls: type) -> bool:
    """Whether ``cls`` is an off-policy learner of the protocol of before (``step``, no ``update``); warns once."""
    if hasattr(cls, "update") or not hasattr(cls, "step"):
        return False
    if (cls, "step") not in _WARNED:
        _WARNED.add((cls, "step"))
        warnings.warn(f"{cls.__module__}.{cls.__qualname__} defines step(batch, ranks, train_policy, demo_rows) and "
                      f"rank_modules(): the off-policy learner protocol of before. It runs through an adapter for "
                      f"this release; define update(batch) and join(ranks) instead (batch.demo_rows, batch.iteration; "
                      f"docs/extending_offpolicy.md, \"An off-policy algorithm in code: TD3\")", FutureWarning,
                      stacklevel=3)
    return True


@dataclass
class LossOutput:
    """Scalar tensors: ``loss``, what the optimizer steps on, and ``stats``, logged as ``train/<name>`` (a term of
    the loss keeps its gradient: PPO's critic warm-up steps on its value term alone)."""

    loss: torch.Tensor
    stats: dict[str, torch.Tensor]


def expand_mask(executed: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The executed mask [B, C] at the granularity of ``like`` (log-probs [B], [B, C] or [B, C, A]):
    a chunk counts if any of its sub-steps ran; per-dimension entries of a sub-step count if it ran."""
    if like.dim() == 1:
        return executed.any(-1)
    if like.dim() == 2:
        return executed
    return executed.unsqueeze(-1).expand(*executed.shape, *like.shape[2:])


def reduce_mask(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``mask`` reduced to the leading dims of ``x`` (an entry counts if any of its sub-entries does)."""
    if mask.dim() <= x.dim():
        return mask
    return (mask != 0).flatten(start_dim=x.dim()).any(dim=-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None, averages: Averages | None = None) -> torch.Tensor:
    """The mean of ``x`` over the entries where ``mask`` (at any granularity: reduced to ``x``'s dims as
    ``reduce_mask`` does) is nonzero; all entries with no mask. With ``averages`` the batch is one part of a larger
    minibatch and the mean is this part's share of the whole one's (``Averages.mean``)."""
    if mask is None:
        return x.mean()
    if averages is not None:
        return averages.mean(x, mask)
    m = reduce_mask(mask, x).to(x.dtype)
    # where() rather than x * mask so a NaN/inf in a masked-out entry cannot leak in.
    return torch.where(m != 0, x * m, torch.zeros_like(x)).sum() / m.sum().clamp_min(1e-8)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass
class Averages:
    """Means over a whole minibatch whose loss is computed in parts: micro-batches (gradient accumulation)
    and actor ranks (data parallel), so that the parts add up to the minibatch computed at once.

    A part's masked mean is its masked *sum* divided by the whole minibatch's count, and advantages are
    standardised with the whole minibatch's mean and std: the parts' losses, gradients and logged stats
    then sum to the whole minibatch's. The counts depend only on ``executed`` and on the shape of what is
    averaged (never on the model's outputs), so they are known before any part runs; ``total`` sums a
    tensor over the actor ranks (the identity on one rank). An algorithm given ``averages=None`` computes
    its means over the tensors it sees, as a single step does.
    """

    executed: torch.Tensor  # bool [B, C]: this rank's whole minibatch
    advantages: torch.Tensor  # [B]: this rank's whole minibatch
    total: Callable[[torch.Tensor], torch.Tensor] = _identity
    _counts: dict[tuple, torch.Tensor] = field(default_factory=dict, repr=False)

    def count(self, mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """How many entries of ``x``'s shape the whole minibatch (all parts, all ranks) counts, where a
        part's ``mask`` (at the log-probs' granularity) is reduced to ``x``'s dims as ``reduce_mask`` does."""
        key = (mask.dim(), tuple(mask.shape[2:]), x.dim())
        if key not in self._counts:  # the same keys in the same order on every rank: the collectives match
            whole = reduce_mask(expand_mask(self.executed, mask), x)
            self._counts[key] = self.total(whole.sum().to(torch.float64)).to(x.dtype)
        return self._counts[key]

    def mean(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """This part's share of the whole minibatch's masked mean of ``x`` (``mask`` reduced to ``x``'s dims)."""
        part = reduce_mask(mask, x)
        # where() rather than x * mask so a NaN/inf in a masked-out entry cannot leak in.
        return torch.where(part != 0, x, torch.zeros_like(x)).sum() / self.count(mask, x).clamp_min(1e-8)

    @functools.cached_property
    def _standardise(self) -> tuple[torch.Tensor, torch.Tensor]:
        adv = self.advantages.double()
        n = self.total(torch.tensor(float(adv.numel()), dtype=torch.float64))
        mean = self.total(adv.sum()) / n
        if n < 2:
            return mean, torch.tensor(float("nan"), dtype=torch.float64)
        std = (self.total(((adv - mean) ** 2).sum()) / (n - 1)).sqrt()  # unbiased, as ``Tensor.std``
        return mean, std

    def normalize(self, adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """``adv`` (a part's) standardised with the whole minibatch's mean and unbiased std."""
        mean, std = self._standardise
        if std.isnan():  # one sample in all: its std is undefined
            return adv - mean.to(adv.dtype)
        return (adv - mean.to(adv.dtype)) / (std.to(adv.dtype) + eps)


class RankGroup(Protocol):
    """The actor ranks' collectives an on-policy update uses (``embodied.workers.ranks.Ranks``; one rank:
    identities)."""

    size: int  # actor ranks, each holding an equal share of the batch

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over the ranks."""

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Each float summed over the ranks."""

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` concatenated along dim 0, in rank order."""

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` as the rank strategy needs it (ddp, fsdp)."""

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """The gradients of ``params`` summed over the ranks (after the last backward of a minibatch)."""


@dataclass(frozen=True)
class UpdateContext:
    """What ``ActorWorker`` lends an on-policy learner for one update: the policy it trains, how, and where."""

    policy: Policy  # the trained policy (this rank's; under fsdp its shards)
    optimizer: torch.optim.Optimizer  # over ``params``; the learner sets its learning rate before every step
    params: list[torch.nn.Parameter]  # what trains, in the optimizer's order (a LoRA backbone's frozen weights not)
    value_head: frozenset[int]  # id() of the policy's value-head parameters (critic warm-up trains these alone)
    device: torch.device  # where the policy computes: each minibatch goes there
    ranks: RankGroup  # the actor ranks' collectives: each rank holds its share of the trajectories
    micro_batches: int  # actor.grad_accumulation_steps: backward passes per minibatch, one gradient step
    version: int  # the weights' version before this update (a chunk step acted by an older one is stale)
    lr: float  # algorithm.lr: the learning rate the schedule scales
    total_iterations: int  # runner.iterations: what anneal_lr decays over
    after_step: Callable[[], None]  # called after every optimizer step (the worker's weight average)


class OnPolicyLearner(Protocol):
    """What ``ActorWorker`` trains through (``algorithm.name``'s ``algorithm_class``): one update over a rollout's
    trajectories. The worker owns the policy's copies (ranks, weight sync, the weight average) and checkpoint I/O;
    the learner owns everything the update decides (advantages, epochs, minibatches, the learning rate)."""

    # Batch metrics that are counts: with several actor ranks they are summed over the ranks; every other batch
    # metric is a mean over equal shares of the batch, and is averaged.
    summed_metrics: ClassVar[frozenset[str]]

    def __init__(self, cfg: Any, spec: LearnerSpec) -> None:
        """From its config (an ``OnPolicyConfig``) and the run's ``LearnerSpec`` (``spec.seed`` starts its own
        random stream, the same on every rank); built by ``build_learner``."""

    def new_optimizer(self, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
        """The optimizer over ``params`` (the worker builds it, and rebuilds it over a rank's shards)."""

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> dict[str, float]:
        """Train on this rank's ``trajectories`` of ``iteration`` (1-based); returns the whole batch's metrics,
        the same on every rank, each named ``train/...`` or ``<name>/...``."""

    def state_dict(self) -> dict[str, Any]:
        """What exact resume needs of it beyond the policy and optimizer (its random stream). Its keys sit beside
        the worker's (``policy``, ``optimizer``, ``version``, ``live_policy``) in a checkpoint's ``actor`` entry."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``'s; a key it lacks (a checkpoint older than the key) is left as it is."""


class LearnerRanks(Protocol):
    """The actor ranks as an off-policy learner meets them (``embodied.workers.ranks.ProcessGroup``): each holds an
    equal share of every batch."""

    size: int  # actor ranks
    rank: int  # this one's

    def prepare(self, module: torch.nn.Module) -> None:
        """Make ``module`` rank 0's on every rank (its parameters and buffers broadcast)."""

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over the ranks."""


class OffPolicyLearner(Protocol):
    """What the actor worker trains through on replay (``OffPolicyConfig.learner()`` names the class): the learner's
    networks beside the policy (critics, targets, a temperature), its optimizers, and one gradient update on a
    replay batch. The worker owns replay, pacing, ranks and checkpoint I/O (``embodied.workers.replay_training``).

    What one algorithm needs stays in its learner: a critic warm-up reads the batch's ``iteration``, a
    demonstration term its ``demo_rows``, a gradient sum over actor ranks the ranks given to ``join``."""

    name: ClassVar[str]  # its checkpoint keys (``<name>``, ``<name>_counters``, ``<name>_generator``) and metric prefix
    policy_optimizer: torch.optim.Optimizer  # the policy's optimizer: a checkpoint saves it beside the policy
    generator: torch.Generator  # the learner's random stream (this rank's), saved for exact resume

    def __init__(self, policy: Any, cfg: Any, spec: LearnerSpec) -> None:
        """Around ``policy`` (what the rollout workers act with), with ``cfg`` (its ``OffPolicyConfig``) and the
        run's ``LearnerSpec`` (spaces and bounds, chunk, device, ranks, seed, ``algorithm.lr``); built by
        ``build_learner``."""

    def join(self, ranks: LearnerRanks) -> None:
        """Become one of several actor ranks (not called with one): its own modules start as rank 0's
        (``ranks.prepare``; the policy is the worker's), and every update sums its gradients over ``ranks``."""

    def replay_actions(self, trajectory: Trajectory) -> torch.Tensor:
        """What replay's action column holds for each chunk step of ``trajectory`` [T, N, ...]: the executed chunks,
        or what stands for them (DSRL: the noise; DAgger: the expert's labels)."""

    def demo_actions(self, actions: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        """The same column for demonstrated chunks ``actions`` [N, C, A] with their ``executed`` [N, C] mask."""

    def update(self, batch: Any) -> dict[str, float]:
        """One gradient update on a ``ReplaySample`` (this rank's share of the batch; its ``demo_rows`` first rows
        are demonstrations, ``iteration`` the run's iteration). Returns its logged stats, each named ``<name>/...``."""

    def state_dict(self) -> dict[str, Any]:
        """What exact resume needs of it (the policy and its optimizer travel as the worker's)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``'s."""


class StepLearner:
    """An off-policy learner written to the protocol of before (``rank_modules()``, ``step(batch, ranks,
    train_policy, demo_rows)``) as an ``OffPolicyLearner``, for this release (``build_learner`` wraps it, warning
    once). Everything else is the learner's own."""

    def __init__(self, learner: Any, cfg: Any) -> None:
        self.learner, self.cfg, self.ranks = learner, cfg, None

    def __getattr__(self, name: str) -> Any:  # name, policy_optimizer, generator, replay_actions, state_dict, ...
        return getattr(self.__dict__["learner"], name)

    def join(self, ranks: LearnerRanks) -> None:
        for module in self.learner.rank_modules():
            ranks.prepare(module)
        self.ranks = ranks

    def update(self, batch: Any) -> dict[str, float]:
        return self.learner.step(batch, self.ranks, train_policy=batch.iteration > self.cfg.warmup_iterations(),
                                 demo_rows=batch.demo_rows)


def flatten(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, Any]:
    """[T, N, ...] -> [T * N, ...] for minibatching."""

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, *x.shape[2:])

    versions = traj.versions if traj.versions is not None else torch.full(traj.values.shape, traj.version)
    return {
        "forward_inputs": {k: flat(v) for k, v in traj.forward_inputs.items()},
        "actions": flat(traj.actions), "logprobs": flat(traj.logprobs), "values": flat(traj.values),
        "executed": flat(traj.executed), "advantages": flat(advantages), "returns": flat(returns),
        "versions": flat(versions),
    }

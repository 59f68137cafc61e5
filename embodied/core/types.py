"""Batches exchanged between env, rollout and actor workers.

Every key and shape is named here once. ``B`` is the number of envs in a batch (or shard), ``C``
the action-chunk length, ``A`` the action dimension, ``S`` the state dimension and ``T`` the
number of chunk steps in a rollout epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:  # imported where a tensor is built: env worker processes never load torch through this module
    import torch

# Observation keys. An observation is a dict of batched arrays under these keys.
STATES = "states"  # float32 [B, S]
MAIN_IMAGES = "main_images"  # uint8 [B, H, W, 3]
WRIST_IMAGES = "wrist_images"  # uint8 [B, H, W, 3]
TASK_DESCRIPTIONS = "task_descriptions"  # list of B strings

Obs = dict[str, Any]
ObsMode = Literal["state", "rgb", "state+rgb"]
OBS_MODES: tuple[str, ...] = ("state", "rgb", "state+rgb")
LogprobGranularity = Literal["chunk", "action", "token"]


def obs_slice(obs: Obs, start: int, stop: int) -> Obs:
    """Rows ``start:stop`` of every entry of a batched observation."""
    return {k: v[start:stop] for k, v in obs.items()}


def obs_rows(obs: Obs, index: np.ndarray) -> Obs:
    """Rows ``index`` (int [K]) of every entry of a batched observation (arrays and lists alike)."""
    return {k: v[index] if hasattr(v, "shape") else [v[int(i)] for i in index] for k, v in obs.items()}


def obs_concat(parts: list[Obs]) -> Obs:
    """Concatenate batched observations along the env axis (keys must match)."""
    out: Obs = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        out[key] = sum((list(v) for v in values), []) if isinstance(values[0], list) else np.concatenate(values)
    return out


@dataclass
class EpisodeStats:
    """Statistics of one finished episode; ``env_index`` is relative to the batch it came in."""

    env_index: int
    episode_return: float
    length: int  # sub-steps executed in the episode
    success_once: bool  # ``info["success"]`` was true at some sub-step
    success_at_end: bool  # ... and at the last one
    task: str = ""  # the env's task description at the episode's start (per-task eval breakdown)
    sim_unstable: bool = False  # the simulator went unstable (e.g. MuJoCo's bad-QACC reset): truncated there
    env_id: str = ""  # the member of an env mixture the episode ran in ("" outside a mixture)


@dataclass(frozen=True)
class EvalEpisode:
    """One episode of a suite's fixed eval set: its task and the reset ``options`` that start it.

    An env class that has a published eval protocol (LIBERO: task x fixed init state) offers
    ``eval_episodes(**env.kwargs) -> list[EvalEpisode]`` (a classmethod); ``embodied.evaluation.run``
    then runs those instead of seeded resets, and records each episode's options in ``eval.json``.
    """

    task: str  # the task description of the episode
    options: dict[str, Any]  # passed to the env's reset(options=...), e.g. {"task_id": 3, "init_state": 17}


@dataclass(frozen=True)
class EnvFootprint:
    """What one env costs, declared by a heavy simulator class (class attribute ``footprint``).

    The driver checks ``rss_mib`` x the envs a run builds, plus ``process_mib`` x the processes that
    build them (libraries, GL driver, compiled code: paid once per process), against the memory
    available before any worker starts; an env worker builds envs whose ``build_s`` is 1 s or more
    concurrently, with a progress bar.
    """

    rss_mib: float  # resident memory each env adds, MiB (measured)
    build_s: float  # seconds to construct one env (measured)
    process_mib: float = 0.0  # resident memory the first env of a process adds on top of rss_mib, MiB

    @property
    def heavy(self) -> bool:
        """Seconds to build: built on threads with a progress bar, described without building."""
        return self.build_s >= 1.0


def footprint_of(target: Any) -> EnvFootprint | None:
    """The ``footprint`` an env class (or entry point) declares, else None."""
    footprint = getattr(target, "footprint", None)
    return footprint if isinstance(footprint, EnvFootprint) else None


@dataclass
class EpisodeFrames:
    """The rendered frames of one recorded episode, terminal frame included (for videos).

    Frame ``t`` shows the state after sub-step ``t`` (frame 0: after the reset); ``rewards[t]`` and
    ``successes[t]`` belong to that sub-step (0 and the reset's success for frame 0).
    """

    env_index: int  # relative to the vector env that recorded it
    task: str  # task description at the episode's start
    frames: list[np.ndarray] = field(default_factory=list)  # uint8 [H, W, 3] each
    rewards: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)


@dataclass
class PeerFailure:
    """Sent in place of a result when a worker fails mid-exchange, so its peer raises instead of waiting.

    ``error`` is raised by the peer as it is, when the failure must be reported by the peer: an env
    worker whose env hangs cannot return its own error, so its watchdog sends it this way.
    """

    message: str
    error: Exception | None = None


class PeerFailureError(RuntimeError):
    """Raised by a worker that received a ``PeerFailure``: the peer failed, not this worker."""


class EnvError(RuntimeError):
    """An exception raised inside an env (yours or a built-in one), with where it happened.

    ``env_traceback`` is the env's own traceback (its file and line first), as text so it crosses
    process boundaries (Ray) intact. The vector env knows the env index within its batch and the
    sub-step; the env worker adds its rank, the iteration and the chunk step (``located``).
    """

    def __init__(self, env: str, index: int, during: str, env_traceback: str, context: str = "") -> None:
        super().__init__(env, index, during, env_traceback, context)  # args: what pickling rebuilds from
        self.env, self.index, self.during, self.env_traceback, self.context = env, index, during, env_traceback, context

    def located(self, offset: int, context: str) -> EnvError:
        """The same error with the env index made global (``offset`` added) and ``context`` prepended."""
        return type(self)(self.env, self.index + offset, self.during, self.env_traceback,
                          ", ".join(c for c in (context, self.context) if c))

    def __str__(self) -> str:
        where = f"env index {self.index}" + (f", {self.context}" if self.context else "")
        return f"env {self.env!r} raised during {self.during} ({where}):\n{self.env_traceback.rstrip()}"


class EnvStepTimeoutError(EnvError):
    """An env step (or reset) that ran past ``env.step_timeout_s``; ``env_traceback`` is where the env's
    thread was at that moment (its file and line last), ``worker_rank`` the env worker it hangs in."""

    def __init__(self, env: str, index: int, during: str, env_traceback: str, context: str = "",
                 worker_rank: int = -1) -> None:
        super().__init__(env, index, during, env_traceback, context)
        self.args = (*self.args, worker_rank)
        self.worker_rank = worker_rank

    def located(self, offset: int, context: str) -> EnvStepTimeoutError:
        return type(self)(self.env, self.index + offset, self.during, self.env_traceback,
                          ", ".join(c for c in (context, self.context) if c), self.worker_rank)

    def __str__(self) -> str:
        where = f"env index {self.index}" + (f", {self.context}" if self.context else "")
        return (f"env {self.env!r} did not return from {self.during} ({where}); the env's thread was at:\n"
                f"{self.env_traceback.rstrip()}")


def find_env_error(exc: BaseException | None) -> EnvError | None:
    """The ``EnvError`` behind ``exc``: itself, its cause chain, or the cause of a Ray task error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, EnvError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


@dataclass
class ChunkStepResult:
    """Outcome of one chunk step of a vectorized env (the contract lives in ``embodied.envs.chunked``)."""

    obs: Obs  # what the policy acts on next
    rewards: np.ndarray  # float32 [B, C], 0 where not executed
    terminations: np.ndarray  # bool [B, C]
    truncations: np.ndarray  # bool [B, C]
    executed: np.ndarray  # bool [B, C], sub-steps that really ran
    dones: np.ndarray  # bool [B], the episode ended inside this chunk
    final_obs: Obs | None = None  # terminal obs; rows meaningful where ``dones``; None if no env done
    episodes: list[EpisodeStats] = field(default_factory=list)
    # float32 [B, C, A]: the env's scripted expert's action on the state each executed sub-step started from, 0 where
    # not executed; only from ``labelled_chunk_step`` (env workers asked for expert labels), else None
    expert_actions: np.ndarray | None = None

    @property
    def terminated(self) -> np.ndarray:
        """bool [B]: the episode ended by termination (no bootstrap) inside this chunk."""
        return self.terminations.any(axis=1)

    @property
    def truncated(self) -> np.ndarray:
        """bool [B]: the episode ended by truncation only (bootstrap from ``final_obs``)."""
        return self.truncations.any(axis=1) & ~self.terminated

    def slice(self, start: int, stop: int) -> ChunkStepResult:
        """Rows ``start:stop``; episode indices are re-based to the slice."""
        return ChunkStepResult(
            obs=obs_slice(self.obs, start, stop),
            rewards=self.rewards[start:stop],
            terminations=self.terminations[start:stop],
            truncations=self.truncations[start:stop],
            executed=self.executed[start:stop],
            dones=self.dones[start:stop],
            final_obs=None if self.final_obs is None else obs_slice(self.final_obs, start, stop),
            episodes=[
                dataclasses.replace(e, env_index=e.env_index - start)
                for e in self.episodes
                if start <= e.env_index < stop
            ],
            expert_actions=None if self.expert_actions is None else self.expert_actions[start:stop],
        )

    @staticmethod
    def concat(parts: list[ChunkStepResult]) -> ChunkStepResult:
        """Join shards along the env axis (inverse of ``slice``)."""
        offsets = np.cumsum([0] + [len(p.dones) for p in parts])
        final_obs = None
        if any(p.final_obs is not None for p in parts):
            final_obs = obs_concat([p.final_obs if p.final_obs is not None else p.obs for p in parts])
        return ChunkStepResult(
            obs=obs_concat([p.obs for p in parts]),
            rewards=np.concatenate([p.rewards for p in parts]),
            terminations=np.concatenate([p.terminations for p in parts]),
            truncations=np.concatenate([p.truncations for p in parts]),
            executed=np.concatenate([p.executed for p in parts]),
            dones=np.concatenate([p.dones for p in parts]),
            final_obs=final_obs,
            episodes=[
                dataclasses.replace(e, env_index=e.env_index + int(off))
                for p, off in zip(parts, offsets)
                for e in p.episodes
            ],
            expert_actions=(None if any(p.expert_actions is None for p in parts)
                            else np.concatenate([p.expert_actions for p in parts])),
        )


@dataclass
class PolicyOutput:
    """What ``Policy.act`` returns for a batch of observations."""

    actions: torch.Tensor  # float32 [B, C, A]
    logprobs: torch.Tensor  # [B] (chunk), [B, C] (action) or [B, C, A] (token)
    values: torch.Tensor  # float32 [B]
    forward_inputs: dict[str, torch.Tensor]  # what ``evaluate`` needs to replay the forward pass
    version: int = -1  # weight version that produced it (stamped by the rollout worker)


@dataclass
class NoiseSteering:
    """A frozen flow policy over a batch of observations, ready to act from a given initial noise (DSRL).

    The policy's prefix (its backbone over images and prompt) is computed once; ``decode`` then runs the
    flow's deterministic Euler loop (the ODE) from the noise it is given, as the policy's greedy ``act`` does
    from the noise it draws itself.
    """

    features: torch.Tensor  # float32 [B, F]: a frozen encoding the policy computes anyway (CPU)
    decode: Callable[[torch.Tensor], torch.Tensor]  # noise [B, Cn, An] -> env actions float32 [B, C, A] (CPU)


@dataclass
class Trajectory:
    """One rollout epoch of one rollout worker: T chunk steps of N envs (torch, on CPU)."""

    forward_inputs: dict[str, torch.Tensor]  # each [T, N, ...]
    actions: torch.Tensor  # float32 [T, N, C, A]
    logprobs: torch.Tensor  # [T, N] or [T, N, C] or [T, N, C, A]
    values: torch.Tensor  # float32 [T, N]
    rewards: torch.Tensor  # float32 [T, N, C]
    executed: torch.Tensor  # bool [T, N, C]
    dones: torch.Tensor  # bool [T, N]
    terminated: torch.Tensor  # bool [T, N]
    final_values: torch.Tensor  # float32 [T, N], V(final_obs) where truncated (or done, bootstraps_terminations)
    next_values: torch.Tensor  # float32 [N], V(obs after the last chunk step)
    version: int  # weight version the rollout started with (the oldest of ``versions``)
    versions: torch.Tensor | None = None  # int64 [T, N]: the version each chunk step acted with (async: it may rise)
    episodes: list[EpisodeStats] = field(default_factory=list)
    # Off-policy runs (rollout workers with record_observations): the obs as the env gave it (its array entries),
    # what each chunk step acted on, and the obs after it: ``final_obs`` where the episode ended in the chunk.
    observations: dict[str, torch.Tensor] | None = None  # each [T, N, ...]
    next_observations: dict[str, torch.Tensor] | None = None  # each [T, N, ...]
    # float32 [T, N, C, A]: the env's scripted expert's action on each executed sub-step's state (0 elsewhere), when
    # the algorithm asked the env workers for expert labels (``AlgorithmConfig.expert_labels``), else None
    expert_actions: torch.Tensor | None = None

    @property
    def num_env_steps(self) -> int:
        """Sub-steps really executed in this trajectory."""
        return int(self.executed.sum())

    @staticmethod
    def concat(parts: list[Trajectory]) -> Trajectory:
        """Join trajectories of several rollout workers along the env axis N."""
        if len(parts) == 1:
            return parts[0]
        versions = {p.version for p in parts}
        if len(versions) != 1:
            raise ValueError(f"trajectories come from different weight versions {sorted(versions)}")
        import torch

        def cat(name: str, dim: int = 1) -> torch.Tensor:
            return torch.cat([getattr(p, name) for p in parts], dim=dim)

        return Trajectory(
            forward_inputs={k: torch.cat([p.forward_inputs[k] for p in parts], 1) for k in parts[0].forward_inputs},
            actions=cat("actions"),
            logprobs=cat("logprobs"),
            values=cat("values"),
            rewards=cat("rewards"),
            executed=cat("executed"),
            dones=cat("dones"),
            terminated=cat("terminated"),
            final_values=cat("final_values"),
            next_values=cat("next_values", 0),
            version=parts[0].version,
            versions=cat("versions") if all(p.versions is not None for p in parts) else None,
            episodes=[e for p in parts for e in p.episodes],
            observations=_cat_obs([p.observations for p in parts]),
            next_observations=_cat_obs([p.next_observations for p in parts]),
            expert_actions=cat("expert_actions") if all(p.expert_actions is not None for p in parts) else None,
        )


def _cat_obs(parts: list[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor] | None:
    """Recorded observations [T, N, ...] joined along N (None unless every part recorded them)."""
    if any(p is None for p in parts):
        return None
    import torch

    return {k: torch.cat([p[k] for p in parts], 1) for k in parts[0]}  # type: ignore[index]


@dataclass
class RolloutSummary:
    """What the driver learns of one rollout worker's epoch; the trajectory itself stays with the worker until
    it sends it to its actor rank (``MultiStepRolloutWorker.send_trajectory``), never through the driver."""

    epoch: int  # the driver's rollout epoch it belongs to (a redone epoch keeps its number)
    num_env_steps: int  # sub-steps really executed
    episodes: list[EpisodeStats]  # episodes that ended in it
    version: int  # the oldest weight version it acted with
    num_versions: int  # how many weight versions acted in it (async runs: new weights arrive mid-epoch)

    @classmethod
    def of(cls, trajectory: Trajectory, epoch: int) -> RolloutSummary:
        versions = trajectory.versions
        return cls(epoch, trajectory.num_env_steps, trajectory.episodes, trajectory.version,
                   1 if versions is None else len(versions.unique()))

"""Non-finite numbers (NaN, inf) caught where they first appear, and named.

Like SB3's ``VecCheckNan``, but on every path of a run and always on: the checks are a few
``isfinite`` reductions per chunk step, small beside a simulator step.

- env worker: observations (every float key, and the terminal ``final_obs``) and rewards of each
  chunk step (``check_env_result``): an ``EnvError`` naming the env, env index and sub-step;
- rollout worker: the policy's actions, log-probs and values (``check_policy_output``);
- actor: each loss term and the gradient norm of every minibatch (``non_finite_terms``); with
  ``algorithm.skip_nonfinite_updates`` the minibatch is skipped and counted instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the env-side checks need numpy only: env worker processes never load torch
    import torch

from embodied.core.types import ChunkStepResult, EnvError, Obs


class NonFiniteError(EnvError):
    """An env returned NaN or inf; where and what, without a traceback (no exception was raised)."""

    def __str__(self) -> str:
        where = f"env index {self.index}" + (f", {self.context}" if self.context else "")
        return f"env {self.env!r} returned {self.env_traceback} at {self.during} ({where})"


class NonFinitePolicyError(RuntimeError):
    """A policy produced NaN or inf actions, log-probs or values (before any env executed them)."""


class NonFiniteUpdateError(RuntimeError):
    """A loss term or a gradient of an update was NaN or inf (nothing was applied or published)."""


def first_non_finite(obs: Obs) -> tuple[str, int] | None:
    """(key, env row) of the first non-finite float entry of a batched obs, else None."""
    for key, value in obs.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            bad = ~np.isfinite(value.reshape(len(value), -1)).all(axis=1)
            if bad.any():
                return key, int(np.argmax(bad))
    return None


def check_env_result(result: ChunkStepResult, env: str, offset: int, context: str) -> None:
    """Raise ``NonFiniteError`` at the first NaN/inf reward or observation of a chunk step.

    Rows are env indices within the batch (``offset`` makes them global); an observation's
    sub-step is the last one its env executed in the chunk.
    """
    rewards = np.where(result.executed, result.rewards, 0.0)
    bad = ~np.isfinite(rewards)
    if bad.any():
        i, c = (int(v) for v in np.argwhere(bad)[0])
        raise NonFiniteError(env, i + offset, f"sub-step {c} of the chunk", f"a non-finite reward ({rewards[i, c]})",
                             context)
    for obs, what in ((result.final_obs, "terminal observation"), (result.obs, "observation")):
        found = first_non_finite(obs) if obs is not None else None
        if found is not None:
            key, i = found
            executed = np.flatnonzero(result.executed[i])
            step = f"sub-step {int(executed[-1])} of the chunk" if len(executed) else "the chunk step"
            raise NonFiniteError(env, i + offset, step, f"a non-finite {what} ({key} holds NaN or inf)",
                                 context)


def check_reset_obs(obs: Obs, env: str, offset: int, context: str) -> None:
    """Raise ``NonFiniteError`` if a reset returned a non-finite observation."""
    found = first_non_finite(obs)
    if found is not None:
        key, i = found
        raise NonFiniteError(env, i + offset, "reset()", f"a non-finite observation ({key} holds NaN or inf)", context)


def non_finite_outputs(tensors: Mapping[str, torch.Tensor]) -> list[tuple[str, int]]:
    """(name, first bad row) of each tensor holding NaN or inf, e.g. a policy's actions."""
    import torch

    found = []
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):  # the common case: one reduction
            bad = ~torch.isfinite(t.reshape(len(t), -1)).all(dim=1)
            if bool(bad.any()):
                found.append((name, int(bad.nonzero()[0])))
    return found


def non_finite_terms(stats: Mapping[str, float]) -> list[str]:
    """The names of the non-finite values among a minibatch's loss terms and gradient norm."""
    return [name for name, value in stats.items() if not np.isfinite(value)]

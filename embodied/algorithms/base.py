"""What the actor asks of a training algorithm (``algorithm.name``, found through a registry).

An algorithm turns the rollout's trajectories into a flat batch of chunk steps with advantages
(``prepare``), and a minibatch of the policy's replayed outputs into a loss (``loss``). It may
ask the env workers to reset every env at the start of each rollout epoch (``rollout_reset``),
as GRPO does so that a group of envs starts from one seed. The maths lives in pure functions
beside each algorithm (``gae.py``, ``ppo.py``, ``grpo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from embodied.types import Trajectory


@dataclass
class LossOutput:
    """Scalar tensors; only ``loss`` carries gradient, ``stats`` are logged as ``train/<name>``."""

    loss: torch.Tensor
    stats: dict[str, torch.Tensor]


@dataclass
class RolloutReset:
    """Reset every env before the epoch: env ``i`` gets seed ``seed + i // group_size``."""

    seed: int
    group_size: int = 1


class Algorithm(Protocol):
    """The interface ``ActorWorker`` trains through."""

    uses_values: ClassVar[bool]  # whether the value head is trained (and bootstrapping needed)

    def rollout_reset(self, iteration: int, num_envs: int, seed: int) -> RolloutReset | None:
        """Reset envs before this iteration's rollout (None: episodes carry on across epochs)."""

    def prepare(self, trajectories: list[Trajectory]) -> tuple[dict[str, Any], dict[str, float]]:
        """Flat batch ``[T * N, ...]`` (forward_inputs, actions, logprobs, values, executed, advantages,
        returns) and metrics of the batch."""

    def loss(self, logprobs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, mb: dict[str, Any],
             mask: torch.Tensor, warmup: bool) -> LossOutput:
        """The minibatch loss; ``warmup`` trains the value head alone (critic warm-up)."""


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

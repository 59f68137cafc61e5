"""The lower-level simulator protocol: step a whole batch of envs at once.

Implement ``BatchedEnv`` directly when per-env gymnasium objects do not fit: a GPU simulator
that steps thousands of envs in one kernel, or a fleet of remote robots behind one client.
``ChunkedVectorEnv`` is the reference implementation over gymnasium envs; an implementation
of your own must honour the same chunk-step contract (``envs.chunked``'s docstring):

- ``reset(seed)`` resets every env (env ``i`` seeded with ``seed + i``) and returns the batched obs;
- ``chunk_step(actions float32[B, C, A])`` returns a ``ChunkStepResult``: sub-actions stop at the
  sub-step an episode ends, ``executed`` marks what ran, done envs are reset at the chunk
  boundary when ``auto_reset`` (``final_obs`` keeps the terminal obs) or stay done otherwise;
- ``render()`` gives one RGB frame per env; ``close()`` frees everything.

Register it like any env (``ENVS.register("MyGpuSim-v0", "my_pkg.sim:MyGpuSim")`` or name it
in ``env.id``) and set the class attribute ``batched = True``; the env worker then constructs it
once per env rank as ``cls(num_envs=..., auto_reset=..., obs_mode=..., max_episode_steps=...,
**env.kwargs)`` and calls ``reset(seed)``, instead of wrapping per-env gymnasium objects.
``embodied check-env ID`` validates an implementation against the contract.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from embodied.types import ChunkStepResult, Obs


@runtime_checkable
class BatchedEnv(Protocol):
    """What an env worker needs of a simulator: a batch of envs with chunked actions."""

    batched: ClassVar[bool]
    num_envs: int
    single_observation_space: gym.spaces.Dict
    single_action_space: gym.spaces.Box

    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; env ``i`` gets ``seed + i``. Returns the batched first observation."""

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Run one action chunk float32 [B, C, A] under the chunk-step contract."""

    def render(self) -> list[np.ndarray]:
        """One uint8 [H, W, 3] frame per env."""

    def close(self) -> None:
        """Free simulator resources."""


def is_batched(target: object) -> bool:
    """Whether a registered env entry point implements ``BatchedEnv`` itself."""
    return bool(getattr(target, "batched", False))

"""A bounded ring buffer of chunk transitions for off-policy training (SAC), held by the actor.

Filled from the ``Trajectory`` objects the rollout workers send over the ``trajectories`` channel (recorded
with their observations: ``Trajectory.observations`` / ``next_observations``). One row is one chunk step of
one env: the obs as the env gave it (uint8 images stay uint8), the chunk ``[C, A]``, its discounted reward
and bootstrap discount (``embodied.algorithms.sac.chunk_reward``), whether it bootstraps (not terminated)
and the next obs (``final_obs`` where the episode ended). All on the CPU; when full the oldest rows go first.

    replay = ReplayBuffer(capacity=100_000)
    received = replay.add(trajectory, gamma=0.99)           # chunk transitions added
    batch = replay.sample(256, torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from typing import Any

import torch

from embodied.algorithms.sac import ReplaySample, chunk_reward
from embodied.types import Trajectory

_FIELDS = ("actions", "reward", "discount", "bootstrap")


class ReplayBuffer:
    """``capacity`` chunk transitions in preallocated CPU tensors, allocated at the first ``add``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.size = 0  # rows filled
        self.position = 0  # the next row written
        self.added = 0  # rows ever added (the oldest are overwritten once it passes capacity)
        self.storage: dict[str, torch.Tensor] = {}  # "obs/<key>", "next_obs/<key>" and _FIELDS, each [capacity, ...]

    def __len__(self) -> int:
        return self.size

    def add(self, trajectory: Trajectory, gamma: float, actions: torch.Tensor | None = None) -> int:
        """Every chunk step of ``trajectory`` that executed a sub-step; returns how many were added.

        ``actions`` [T, N, ...] are what the critics score, when not the executed chunks (``Policy.replay_actions``:
        DSRL's initial noise)."""
        if trajectory.observations is None or trajectory.next_observations is None:
            raise ValueError("replay needs trajectories recorded with observations (rollout workers with "
                             "record_observations, which an off-policy algorithm turns on)")
        reward, discount = chunk_reward(trajectory.rewards, trajectory.executed, gamma)  # [T, N]
        rows = {"actions": trajectory.actions if actions is None else actions, "reward": reward, "discount": discount,
                "bootstrap": ~trajectory.terminated}
        rows |= {f"obs/{k}": v for k, v in trajectory.observations.items()}
        rows |= {f"next_obs/{k}": v for k, v in trajectory.next_observations.items()}
        keep = trajectory.executed.any(-1).reshape(-1)  # an env done earlier (no auto-reset) executed nothing
        flat = {k: v.reshape(-1, *v.shape[2:])[keep] for k, v in rows.items()}
        count = int(keep.sum())
        if count:
            self._write(flat, count)
        return count

    def add_transitions(self, obs: dict[str, torch.Tensor], actions: torch.Tensor, reward: torch.Tensor,
                        discount: torch.Tensor, bootstrap: torch.Tensor, next_obs: dict[str, torch.Tensor]) -> int:
        """Chunk transitions already flat ([M, ...] each, as ``ReplaySample`` names them): RLPD's demonstrations."""
        rows = {"actions": actions, "reward": reward, "discount": discount, "bootstrap": bootstrap}
        rows |= {f"obs/{k}": v for k, v in obs.items()} | {f"next_obs/{k}": v for k, v in next_obs.items()}
        if len(actions):
            self._write(rows, len(actions))
        return len(actions)

    def _write(self, rows: dict[str, torch.Tensor], count: int) -> None:
        if not self.storage:
            self.storage = {k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in rows.items()}
        if rows.keys() != self.storage.keys():
            raise ValueError(f"transitions with keys {sorted(rows)} do not fit a replay of {sorted(self.storage)}")
        if count > self.capacity:  # only the newest fit
            rows, count = {k: v[-self.capacity:] for k, v in rows.items()}, self.capacity
        index = (self.position + torch.arange(count)) % self.capacity
        for key, value in rows.items():
            self.storage[key][index] = value.to(self.storage[key].dtype)
        self.position = (self.position + count) % self.capacity
        self.size = min(self.size + count, self.capacity)
        self.added += count

    def sample(self, batch_size: int, generator: torch.Generator) -> ReplaySample:
        """``batch_size`` rows drawn uniformly with replacement; the same ``generator`` state draws the same rows."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = torch.randint(self.size, (batch_size,), generator=generator)
        rows = {k: v[index] for k, v in self.storage.items()}
        return ReplaySample(
            obs={k[4:]: v for k, v in rows.items() if k.startswith("obs/")},
            actions=rows["actions"].float(), reward=rows["reward"].float(), discount=rows["discount"].float(),
            bootstrap=rows["bootstrap"].bool(),
            next_obs={k[9:]: v for k, v in rows.items() if k.startswith("next_obs/")})

    def state_dict(self) -> dict[str, Any]:
        """The filled rows and the ring's position (checkpoints: a resumed run samples the same batches)."""
        return {"capacity": self.capacity, "size": self.size, "position": self.position, "added": self.added,
                "storage": {k: v[: self.size].clone() for k, v in self.storage.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"the saved replay holds {state['capacity']} rows, this one {self.capacity} "
                             f"(algorithm.replay_capacity differs)")
        self.size, self.position, self.added = int(state["size"]), int(state["position"]), int(state["added"])
        self.storage = {}
        for key, rows in state["storage"].items():
            self.storage[key] = torch.zeros((self.capacity, *rows.shape[1:]), dtype=rows.dtype)
            self.storage[key][: self.size] = rows

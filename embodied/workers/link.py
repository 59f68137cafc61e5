"""The env <-> rollout exchange seen from one worker: its shards and the two channels."""

from __future__ import annotations

from dataclasses import dataclass

from embodied.channels import Channel, Shard


@dataclass
class Link:
    """A worker's shards (in env order) and the channels both directions travel on."""

    shards: list[Shard]  # this rank's shards, sorted by start
    to_rollout: Channel  # env -> rollout: first observations and chunk-step results
    to_env: Channel  # rollout -> env: action chunks
    timeout: float | None = 600.0  # seconds a get may wait before the peer is presumed dead

    @property
    def start(self) -> int:
        """First global env index covered by this worker."""
        return self.shards[0].start

    @property
    def num_envs(self) -> int:
        return sum(s.size for s in self.shards)

    @staticmethod
    def key(shard: Shard) -> str:
        return f"env{shard.env_rank}-rollout{shard.rollout_rank}"

    def local(self, shard: Shard) -> tuple[int, int]:
        """The shard's rows relative to this worker's first env."""
        return shard.start - self.start, shard.stop - self.start

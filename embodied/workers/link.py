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
    stages: int = 1  # pipeline stages: stage of a shard = its (virtual) env rank % stages
    # Bumped when failed workers are replaced: the exchange moves to fresh keys, so nothing a failed
    # or abandoned worker left in (or later puts into) the channels reaches the redone epoch.
    generation: int = 0
    cleared: int = 0  # the keys of generations below this were discarded (``move_to``)

    @property
    def start(self) -> int:
        """First global env index covered by this worker."""
        return self.shards[0].start

    @property
    def num_envs(self) -> int:
        return sum(s.size for s in self.shards)

    def key(self, shard: Shard) -> str:
        """The channel key of ``shard``'s exchange (both directions) in this generation."""
        return self._key(shard, self.generation)

    @staticmethod
    def _key(shard: Shard, generation: int) -> str:
        return f"env{shard.env_rank}-rollout{shard.rollout_rank}/{generation}"

    def move_to(self, generation: int) -> None:
        """Exchange on the keys of ``generation`` from now on, and discard this link's keys of every earlier
        generation in both channels: what a failed worker left queued there (its last observations or
        actions) would otherwise stay for the rest of the run, once per restart."""
        self.generation = generation
        for old in range(self.cleared, generation):
            for shard in self.shards:
                key = self._key(shard, old)
                self.to_rollout.discard(key)
                self.to_env.discard(key)
        self.cleared = max(self.cleared, generation)

    def fail(self, channel: Channel, failure: object) -> None:
        """Put ``failure`` (a ``PeerFailure``) on every shard's key of ``channel``: the peers raise instead of waiting."""
        for shard in self.shards:
            channel.put(self.key(shard), failure)

    def stage_shards(self) -> list[list[Shard]]:
        """This worker's shards grouped by pipeline stage (a stage may hold none of them)."""
        return [[s for s in self.shards if s.env_rank % self.stages == stage] for stage in range(self.stages)]

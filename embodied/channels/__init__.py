"""Channels: keyed FIFOs that carry observation and action shards between workers.

``import embodied.channels`` does not import ``ray``; ``RayChannel.create`` does.
"""

from __future__ import annotations

from embodied.channels.base import Channel, ChannelTimeout
from embodied.channels.local import LocalChannel
from embodied.channels.ray_channel import RayChannel
from embodied.channels.routing import Shard, rank_slices, route, shards_for_env_rank, shards_for_rollout_rank

__all__ = [
    "Channel",
    "ChannelTimeout",
    "LocalChannel",
    "RayChannel",
    "Shard",
    "rank_slices",
    "route",
    "shards_for_env_rank",
    "shards_for_rollout_rank",
]

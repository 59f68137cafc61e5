"""Cross-process channel: one async Ray actor holds the keyed queues, the object store the data.

Only object refs pass through the actor: ``put`` does ``ray.put(item)`` in the caller and sends
the ref wrapped in a list (so Ray hands the actor the ref itself, not the value); ``get``
receives the wrapped ref back and fetches the value from the object store. Large arrays are
therefore never pickled through the actor.

Caveats:
    - A ref is owned by the process that put it; if that process exits before the item is
      read, the read fails with Ray's owner-died error.
    - Arrays come back read-only: ``get`` maps them zero-copy from the object store, so copy
      one before writing to it in place.
    - An interrupted blocking ``get`` (or a cancelled ``aget``) may already have popped its
      item in the actor, and that item is lost. Use the ``timeout`` argument rather than
      cancelling from outside.

``ray`` is imported lazily so that ``import embodied.channels`` stays light.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any

from embodied.channels.base import ChannelTimeout, check_timeout

if TYPE_CHECKING:
    from ray.actor import ActorHandle

# What travels through the actor: a one-element list holding an ObjectRef.
_Wrapped = list[Any]


class _KeyedQueues:
    """Actor body: one ``asyncio.Queue`` of wrapped refs per key.

    All methods run on the actor's single event loop, so creating a queue on first use needs
    no lock.
    """

    def __init__(self) -> None:
        self._queues: dict[str, asyncio.Queue[_Wrapped]] = {}

    def _queue(self, key: str) -> asyncio.Queue[_Wrapped]:
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = asyncio.Queue()
        return q

    async def put(self, key: str, wrapped: _Wrapped) -> None:
        self._queue(key).put_nowait(wrapped)

    async def get(self, key: str, timeout: float | None) -> _Wrapped | None:
        """Return the oldest wrapped ref, or None on timeout (items are never None)."""
        q = self._queue(key)
        if not q.empty():
            # wait_for with timeout 0 would give up before even looking at the queue.
            return q.get_nowait()
        try:
            return await asyncio.wait_for(q.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def qsize(self, key: str) -> int:
        q = self._queues.get(key)
        return 0 if q is None else q.qsize()


@functools.cache
def _actor_class() -> Any:
    """The Ray actor class, built once per process (this is where ``ray`` gets imported)."""
    import ray

    # num_cpus=0: the channel is I/O only and must never hold a CPU that workers need.
    return ray.remote(num_cpus=0)(_KeyedQueues)


class RayChannel:
    """Keyed FIFO shared across Ray processes; picklable, so it can be handed to actors.

    Build it with ``RayChannel.create(name)``; pass the object to remote tasks/actors as a
    normal argument. ``close()`` kills the backing actor for every holder.
    """

    def __init__(self, name: str, actor: ActorHandle) -> None:
        self.name = name
        self._actor = actor

    @classmethod
    def create(cls, name: str) -> RayChannel:
        """Start the backing actor (needs an initialized Ray) and return a handle to it."""
        return cls(name, _actor_class().remote())

    def __repr__(self) -> str:
        return f"RayChannel({self.name!r})"

    def put(self, key: str, item: Any) -> None:
        """Store ``item`` in the object store and enqueue its ref under ``key``."""
        import ray

        # Waiting for the actor's ack keeps puts from one caller in order: Ray does not
        # promise submission order for async actors.
        ray.get(self._actor.put.remote(key, [ray.put(item)]))

    def get(self, key: str, timeout: float | None = None) -> Any:
        """Pop the oldest item under ``key``, blocking up to ``timeout`` seconds."""
        import ray

        check_timeout(timeout)
        wrapped = ray.get(self._actor.get.remote(key, timeout))
        if wrapped is None:
            raise ChannelTimeout(self.name, key, timeout)
        return ray.get(wrapped[0])

    async def aput(self, key: str, item: Any) -> None:
        """Async twin of ``put``."""
        import ray

        # ray.put is a local copy into shared memory; only the actor round trip is awaited.
        await self._actor.put.remote(key, [ray.put(item)])

    async def aget(self, key: str, timeout: float | None = None) -> Any:
        """Async twin of ``get``."""
        check_timeout(timeout)
        wrapped = await self._actor.get.remote(key, timeout)
        if wrapped is None:
            raise ChannelTimeout(self.name, key, timeout)
        return await wrapped[0]

    def qsize(self, key: str) -> int:
        """Number of items queued under ``key`` in the actor."""
        import ray

        return ray.get(self._actor.qsize.remote(key))

    def close(self, wait_s: float = 10.0) -> None:
        """Kill the backing actor; queued items are dropped and later calls fail.

        ``ray.kill`` returns before the actor is gone, so a call right after it could still be
        answered; this waits (up to ``wait_s``) until the actor answers with its death.
        """
        import ray

        ray.kill(self._actor)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                ray.get(self._actor.qsize.remote(""), timeout=1.0)
            except ray.exceptions.RayActorError:
                return
            except ray.exceptions.GetTimeoutError:
                continue
            time.sleep(0.01)

"""Cross-process channel on Ray: producers deliver straight into the consumer's process.

Every key has one consuming process. When the consumer is a worker actor built by the Ray
backend (``mailbox.mailbox_actor``), its first ``get`` on a key registers the actor with the channel's
small directory actor; from then on producers call the consumer's ``_embodied_deliver`` method
directly, without waiting for an answer, and ``get`` waits on an in-process queue. No message
goes through a hub and no ``put`` waits for a round trip. Items are the call's argument, so Ray
keeps large ones (image batches) in the shared-memory object store and hands them to the
consumer zero-copy; small ones travel inline in the call.

Before a key's consumer has registered, and for consumers that are not mailbox actors (the
driver, a plain task), items wait in the directory actor as object refs (``ray.put`` in the
producer: the payload is never pickled through the actor), exactly as a hub channel does. At
registration the directory hands the waiting items over and forwards any that arrive later.

Order: Ray does not order calls into threaded or async actors, so every put carries the
sender's id and a per-(sender, key) sequence number, and the consumer side releases items in
sequence order. Items put by one process under one key therefore come out in the order they
were put; items from different processes interleave. A ``get`` also waits for the items its own
process put under the key before it (read-your-writes), however short its timeout.

Caveats:
    - A key must be consumed by one process: the first mailbox actor to ``get`` it owns it.
    - Arrays may come back read-only (mapped zero-copy from the object store): copy before
      writing in place.
    - A ref is owned by the process that put it; if that process exits before the item is read,
      the read fails with Ray's owner-died error.

``ray`` is imported lazily so that ``import embodied.channels`` stays light.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from embodied.channels.base import ChannelTimeout, check_timeout

if TYPE_CHECKING:
    from ray.actor import ActorHandle

DELIVER = "_embodied_deliver"  # the method a mailbox actor receives items on
RSS_METHOD = "_embodied_rss_mib"  # a mailbox actor's process resident memory (MiB), answered beside its work
NODE_METHOD = "_embodied_node_id"  # the Ray node a mailbox actor runs on, answered beside its work
MAILBOX_GROUP = "embodied_mailbox"  # its concurrency group: deliveries never wait for the worker's own calls


class _Reorder:
    """Releases items in per-sender sequence order (items may arrive out of order)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._early: dict[tuple[str, int], Any] = {}

    def add(self, sender: str, seq: int, item: Any) -> list[Any]:
        """Record item ``seq`` of ``sender``; return the items now in order (possibly none)."""
        self._early[(sender, seq)] = item
        ready = []
        n = self._next.get(sender, 0)
        while (sender, n) in self._early:
            ready.append(self._early.pop((sender, n)))
            n += 1
        self._next[sender] = n
        return ready

    def released(self, sender: str) -> int:
        """How many of ``sender``'s items have been released (its sequence numbers below this)."""
        return self._next.get(sender, 0)


class _Inbox:
    """A consumer's in-process queue for one (channel, key)."""

    def __init__(self) -> None:
        self._order = _Reorder()
        self._ready: deque[Any] = deque()
        self._cond = threading.Condition()

    def add(self, sender: str, seq: int, item: Any) -> None:
        with self._cond:
            self._ready.extend(self._order.add(sender, seq, item))
            self._cond.notify_all()

    def pop(self, timeout: float | None, sender: str, sent: int) -> tuple[bool, Any]:
        """The oldest ready item, waiting up to ``timeout``; first, without a limit, for the ``sent``
        items this process put itself under the key (read-your-writes: they are on their way)."""
        with self._cond:
            self._cond.wait_for(lambda: self._order.released(sender) >= sent)
            if not self._cond.wait_for(lambda: self._ready, timeout):
                return False, None
            return True, self._ready.popleft()

    def size(self, sender: str, sent: int) -> int:
        """Items ready, once the ``sent`` items this process put under the key have arrived."""
        with self._cond:
            self._cond.wait_for(lambda: self._order.released(sender) >= sent)
            return len(self._ready)


# This process's inboxes, by (channel id, key); filled by deliveries, read by ``get``.
_INBOXES: dict[tuple[str, str], _Inbox] = {}
_INBOXES_LOCK = threading.Lock()
_MAILBOX = {"handle": None}  # this process's actor handle, set when it is a mailbox actor


def _inbox(channel_id: str, key: str) -> _Inbox:
    with _INBOXES_LOCK:
        box = _INBOXES.get((channel_id, key))
        if box is None:
            box = _INBOXES[(channel_id, key)] = _Inbox()
        return box


class _Directory:
    """Actor body: who consumes each key, and the items of keys nobody has claimed yet, for every channel that
    shares it (a backend's channels share one: its tables are by (channel id, key)).

    All methods run on the actor's single event loop, so they need no lock.
    """

    def __init__(self) -> None:
        self._consumers: dict[tuple[str, str], Any] = {}
        self._parked: dict[tuple[str, str], list[tuple[str, int, list[Any]]]] = {}  # unclaimed: (sender, seq, wrapped)
        self._order: dict[tuple[str, str], _Reorder] = {}
        self._queues: dict[tuple[str, str], asyncio.Queue[list[Any]]] = {}  # unclaimed, in order: for directory gets
        self._arrived = asyncio.Condition()  # notified on every put

    def _queue(self, key: tuple[str, str]) -> asyncio.Queue[list[Any]]:
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = asyncio.Queue()
        return q

    async def put(self, channel_id: str, name: str, sender: str, seq: int, wrapped: list[Any]) -> None:
        key = (channel_id, name)
        consumer = self._consumers.get(key)
        if consumer is not None:  # claimed since the producer last looked: forward
            getattr(consumer, DELIVER).remote(channel_id, name, sender, seq, wrapped)
            return
        self._parked.setdefault(key, []).append((sender, seq, wrapped))
        for item in self._order.setdefault(key, _Reorder()).add(sender, seq, wrapped):
            self._queue(key).put_nowait(item)
        async with self._arrived:
            self._arrived.notify_all()

    async def claim(self, channel_id: str, name: str, consumer: Any) -> list[tuple[str, int, list[Any]]]:
        """Make ``consumer`` the key's consumer; returns the items parked for it (it reorders them)."""
        key = (channel_id, name)
        self._consumers[key] = consumer
        self._queues.pop(key, None)
        self._order.pop(key, None)
        return self._parked.pop(key, [])

    async def forget(self, channel_id: str, name: str, sender: str, sent: int) -> None:
        """Drop ``key``: its consumer and any items parked for it, once the ``sent`` items the caller
        (``sender``) put under it have arrived (they would be parked again after)."""
        key = (channel_id, name)
        order = self._order.setdefault(key, _Reorder())
        async with self._arrived:
            await self._arrived.wait_for(lambda: order.released(sender) >= sent)
        for table in (self._consumers, self._parked, self._order, self._queues):
            table.pop(key, None)

    async def consumer(self, channel_id: str, name: str) -> Any:
        key = (channel_id, name)
        return self._consumers.get(key)

    async def get(self, channel_id: str, name: str, timeout: float | None, sender: str, sent: int) -> list[Any] | None:
        """The oldest wrapped ref of an unclaimed key, or None on timeout (items are never None).

        First waits, without a limit, until the ``sent`` items the caller (``sender``) put under the
        key have arrived: Ray may run the caller's earlier ``put`` calls after this one.
        """
        key = (channel_id, name)
        order = self._order.setdefault(key, _Reorder())
        async with self._arrived:
            await self._arrived.wait_for(lambda: order.released(sender) >= sent)
        q = self._queue(key)
        if not q.empty():
            # wait_for with timeout 0 would give up before even looking at the queue.
            item = q.get_nowait()
        else:
            try:
                item = await asyncio.wait_for(q.get(), timeout)
            except asyncio.TimeoutError:
                return None
        parked = self._parked[key]
        parked.pop(next(i for i, p in enumerate(parked) if p[2] is item))
        return item

    async def qsize(self, channel_id: str, name: str, sender: str, sent: int) -> int:
        key = (channel_id, name)
        order = self._order.setdefault(key, _Reorder())
        async with self._arrived:  # the caller's own puts first (read-your-writes)
            await self._arrived.wait_for(lambda: order.released(sender) >= sent)
        q = self._queues.get(key)
        return 0 if q is None else q.qsize()


@functools.cache
def _directory_class() -> Any:
    """The Ray actor class, built once per process (this is where ``ray`` gets imported)."""
    import ray

    # num_cpus=0: the channel is I/O only and must never hold a CPU that workers need.
    return ray.remote(num_cpus=0)(_Directory)


class RayChannel:
    """Keyed FIFO shared across Ray processes; picklable, so it can be handed to actors.

    Build it with ``RayChannel.create(name)``; pass the object to remote tasks/actors as a
    normal argument. ``close()`` kills the directory actor for every holder, and so closes every
    channel that shares it (``create(name, directory=...)``: a backend's channels share one actor,
    one process instead of one per channel).
    """

    def __init__(self, name: str, directory: ActorHandle) -> None:
        self.name = name
        self._directory = directory
        self._id = f"{name}-{uuid.uuid4().hex}"  # its keys' namespace in the directory and in consumers' inboxes
        self._local()

    def _local(self) -> None:
        """Per-process state: this sender's id, sequence numbers and the consumers found so far."""
        self._sender = uuid.uuid4().hex
        self._seq: dict[str, int] = {}
        self._routes: dict[str, Any] = {}  # key -> consumer handle, or a pending lookup (ObjectRef)
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "directory": self._directory, "id": self._id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name, self._directory, self._id = state["name"], state["directory"], state["id"]
        self._local()

    @classmethod
    def create(cls, name: str, directory: ActorHandle | None = None, **options: Any) -> RayChannel:
        """A channel on ``directory`` (from ``RayChannel.directory``), or on a directory actor of its own, started
        now with ``options`` (needs an initialized Ray)."""
        return cls(name, directory if directory is not None else cls.directory(**options))

    @staticmethod
    def directory(**options: Any) -> ActorHandle:
        """Start a directory actor that channels may share (``options``: its Ray actor options, such as the run's
        ``runtime_env``)."""
        return _directory_class().options(**options).remote()

    def __repr__(self) -> str:
        return f"RayChannel({self.name!r})"

    # -- producing ---------------------------------------------------------------------------

    def put(self, key: str, item: Any) -> None:
        """Send ``item`` to the key's consumer (or park it in the directory); returns at once."""
        import ray

        with self._lock:
            seq = self._seq.get(key, 0)
            self._seq[key] = seq + 1
            consumer = self._consumer(key)
        if consumer is not None:
            getattr(consumer, DELIVER).remote(self._id, key, self._sender, seq, item)
        else:
            self._directory.put.remote(self._id, key, self._sender, seq, [ray.put(item)])

    def _consumer(self, key: str) -> Any:
        """The key's consumer handle if known; otherwise starts (or checks) a lookup without waiting."""
        import ray

        route = self._routes.get(key)
        if isinstance(route, ray.ObjectRef):
            ready, _ = ray.wait([route], timeout=0)
            if not ready:
                return None
            route = ray.get(route)
            if route is None:
                self._routes[key] = self._directory.consumer.remote(self._id, key)  # ask again for the next put
                return None
            self._routes[key] = route
        elif route is None:
            self._routes[key] = self._directory.consumer.remote(self._id, key)
        return route

    async def aput(self, key: str, item: Any) -> None:
        """Async twin of ``put`` (which never waits)."""
        self.put(key, item)

    # -- consuming ---------------------------------------------------------------------------

    def get(self, key: str, timeout: float | None = None) -> Any:
        """Pop the oldest item under ``key``, blocking up to ``timeout`` seconds."""
        import ray

        check_timeout(timeout)
        if _MAILBOX["handle"] is None:  # not a mailbox actor: fetch from the directory
            wrapped = ray.get(self._directory.get.remote(self._id, key, timeout, self._sender, self._seq.get(key, 0)))
            if wrapped is None:
                raise ChannelTimeout(self.name, key, timeout)
            return ray.get(wrapped[0])
        box = self._claim(key)
        found, item = box.pop(timeout, self._sender, self._seq.get(key, 0))
        if not found:
            raise ChannelTimeout(self.name, key, timeout)
        return ray.get(item[0]) if isinstance(item, list) else item

    def _claim(self, key: str) -> _Inbox:
        """This process's inbox for ``key``, claimed from the directory on first use."""
        import ray

        box = _inbox(self._id, key)
        if key not in self._claimed:
            for sender, seq, wrapped in ray.get(self._directory.claim.remote(self._id, key, _MAILBOX["handle"])):
                box.add(sender, seq, wrapped)
            self._claimed.add(key)
        return box

    async def aget(self, key: str, timeout: float | None = None) -> Any:
        """Async twin of ``get``."""
        check_timeout(timeout)
        if _MAILBOX["handle"] is not None:
            return await asyncio.to_thread(self.get, key, timeout)
        wrapped = await self._directory.get.remote(self._id, key, timeout, self._sender, self._seq.get(key, 0))
        if wrapped is None:
            raise ChannelTimeout(self.name, key, timeout)
        return await wrapped[0]

    def qsize(self, key: str) -> int:
        """Items waiting under ``key``: in this process's inbox if it consumes the key, else in the directory."""
        import ray

        sent = self._seq.get(key, 0)
        if key in self._claimed:
            return _inbox(self._id, key).size(self._sender, sent)
        return ray.get(self._directory.qsize.remote(self._id, key, self._sender, sent))

    def discard(self, key: str) -> None:
        """Forget ``key`` in this process (its inbox, sequence numbers, route) and in the directory (without
        waiting); items still on their way to a consumer are dropped where they land."""
        with self._lock:
            sent = self._seq.pop(key, 0)
            self._routes.pop(key, None)
            self._claimed.discard(key)
        with _INBOXES_LOCK:
            _INBOXES.pop((self._id, key), None)
        self._directory.forget.remote(self._id, key, self._sender, sent)

    def close(self, wait_s: float = 10.0) -> None:
        """Kill the directory actor; items parked there are dropped and later calls fail.

        ``ray.kill`` returns before the actor is gone, so a call right after it could still be
        answered; this waits (up to ``wait_s``) until the actor answers with its death.
        """
        import ray

        ray.kill(self._directory)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                ray.get(self._directory.consumer.remote("", ""), timeout=1.0)
            except ray.exceptions.RayActorError:
                return
            except ray.exceptions.GetTimeoutError:
                continue
            time.sleep(0.01)

"""In-process channel backed by one ``queue.Queue`` per key."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

from embodied.channels.base import ChannelTimeout, check_timeout

# Backoff bounds for ``aget`` polling: short first naps keep latency low, the cap keeps an
# idle waiter cheap.
_POLL_MIN_S = 0.0005
_POLL_MAX_S = 0.01


class LocalChannel:
    """Thread-safe keyed FIFO living in one process (threads and event loops of that process).

    Args:
        name: channel name, used in error messages.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queues: dict[str, queue.Queue[Any]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalChannel({self.name!r})"

    def _queue(self, key: str) -> queue.Queue[Any]:
        # The lock makes "create on first use" atomic, so a getter and a putter that race on a
        # new key share one queue.
        with self._lock:
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = queue.Queue()
            return q

    def put(self, key: str, item: Any) -> None:
        """Append ``item`` under ``key``."""
        self._queue(key).put(item)

    def get(self, key: str, timeout: float | None = None) -> Any:
        """Pop the oldest item under ``key``, blocking up to ``timeout`` seconds."""
        check_timeout(timeout)
        try:
            return self._queue(key).get(timeout=timeout)
        except queue.Empty:
            raise ChannelTimeout(self.name, key, timeout) from None

    async def aput(self, key: str, item: Any) -> None:
        """Append ``item`` under ``key`` (the queue is unbounded, so this never waits)."""
        self.put(key, item)

    async def aget(self, key: str, timeout: float | None = None) -> Any:
        """Pop the oldest item under ``key`` without blocking the event loop.

        Polls instead of handing a blocking ``get`` to a thread: a cancelled poller consumes
        nothing, whereas a cancelled thread would still pop (and lose) the next item.
        """
        check_timeout(timeout)
        q = self._queue(key)
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = _POLL_MIN_S
        while True:
            try:
                return q.get_nowait()
            except queue.Empty:
                pass
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelTimeout(self.name, key, timeout)
                nap = min(nap, left)
            await asyncio.sleep(nap)
            nap = min(nap * 2, _POLL_MAX_S)

    def discard(self, key: str) -> None:
        """Forget ``key`` and the items queued under it."""
        with self._lock:
            self._queues.pop(key, None)

    def qsize(self, key: str) -> int:
        """Approximate number of items queued under ``key``."""
        with self._lock:
            q = self._queues.get(key)
        return 0 if q is None else q.qsize()

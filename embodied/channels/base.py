"""The channel protocol: a named, keyed FIFO shared by env workers and rollout workers."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class ChannelTimeout(TimeoutError):
    """Raised when ``get``/``aget`` finds no item for a key within the timeout.

    Attributes:
        channel: name of the channel that timed out.
        key: the key that was waited on.
        timeout: the timeout in seconds.
    """

    def __init__(self, channel: str, key: str, timeout: float | None) -> None:
        super().__init__(f"channel {channel!r}: no item for key {key!r} within {timeout} s")
        self.channel = channel
        self.key = key
        self.timeout = timeout

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by constructor arguments so the exception survives a trip between processes.
        return (type(self), (self.channel, self.key, self.timeout))


@runtime_checkable
class Channel(Protocol):
    """A keyed FIFO: items put under one key come out of ``get`` in the order they were put.

    Keys are independent and need no declaration; a ``get`` on a key nobody has put to yet
    blocks until an item arrives or the timeout passes (then it raises ``ChannelTimeout``).
    ``timeout=None`` waits forever.
    """

    name: str

    def put(self, key: str, item: Any) -> None:
        """Append ``item`` to the queue of ``key``; never blocks on consumers."""
        ...

    def get(self, key: str, timeout: float | None = None) -> Any:
        """Remove and return the oldest item of ``key``, waiting up to ``timeout`` seconds."""
        ...

    async def aput(self, key: str, item: Any) -> None:
        """Async twin of ``put``."""
        ...

    async def aget(self, key: str, timeout: float | None = None) -> Any:
        """Async twin of ``get``; waits without blocking the event loop."""
        ...

    def qsize(self, key: str) -> int:
        """Number of items currently queued under ``key`` (0 for an unknown key)."""
        ...

    def discard(self, key: str) -> None:
        """Forget ``key`` and drop the items queued under it: a key nobody uses again (what a failed worker left
        under its generation's keys)."""
        ...


def check_timeout(timeout: float | None) -> None:
    """Reject negative timeouts the same way in every backend."""
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")

"""Where a worker's time goes: seconds per activity, accumulated until the driver takes them each iteration.

Env workers time stepping their envs (``step``: physics and the adapter), waiting for action chunks (``wait``) and
putting results on the channel (``send``); rollout workers time acting (``act``), waiting for env results
(``wait``), sending chunks (``send``) and loading new weights mid-epoch (``sync``); the actor its learner's steps
(``learn``) and, off-policy, adding to replay (``replay_insert``) and sampling it (``replay_sample``). The driver logs them as
``busy/<worker><rank>/<activity>`` (``Workers.busy_metrics``); ``benchmarks/profile_recipe.py`` turns them into
shares of an iteration.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Busy:
    """Seconds per activity since the last ``take``."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()  # a worker's concurrent methods may take while it runs

    @contextmanager
    def __call__(self, activity: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._seconds[activity] = self._seconds.get(activity, 0.0) + elapsed

    def take(self) -> dict[str, float]:
        """The seconds per activity so far, and start counting afresh."""
        with self._lock:
            out, self._seconds = self._seconds, {}
        return out

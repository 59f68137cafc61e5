"""Graceful stop: SIGINT (Ctrl-C) or SIGTERM asks a run to stop after the current iteration.

    with StopRequest() as stop:
        for it in ...:
            ...
            if stop.signal:  # e.g. "SIGTERM"
                break          # after writing a final checkpoint

A second signal stops at once (SIGINT: ``KeyboardInterrupt``; SIGTERM: ``SystemExit(143)``).
Handlers are installed only in the main thread (Python allows no other); elsewhere nothing changes.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Remembers the first SIGINT/SIGTERM received while active (``signal``: its name, or None)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.number = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    @property
    def exit_code(self) -> int:
        """The shell's convention for a run ended by a signal: 128 + its number (130, 143)."""
        return 128 + self.number if self.number else 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None:  # the second one: stop now
            self.__exit__()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + signum)
        self.signal, self.number = signal.Signals(signum).name, signum
        print(f"\n{self.signal}: stopping after this iteration, with a final checkpoint "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)

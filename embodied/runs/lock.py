"""One run at a time in a run dir: ``RunLock`` holds ``<run_dir>/run.lock`` (the holder's pid and host) while a
run trains there, so a second run resuming into the same dir (``runner.resume_from``) is refused, naming the holder,
instead of both writing its checkpoints.

The file is created exclusively (``O_CREAT | O_EXCL``), so two starts racing for it cannot both win. A lock whose
holder is gone (its pid no longer runs on this host: a run that was killed) is taken over with a message; a lock held
on another host is refused, since this host cannot see whether that run still lives.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from embodied.config import ConfigError

LOCK_FILE = "run.lock"


class RunLock:
    """``with RunLock(run_dir):`` the run dir is this process's until the block ends."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    def __enter__(self) -> RunLock:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        for _ in range(2):  # a stale lock is removed once, then taken
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._refuse_or_clear(me["host"])
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise ConfigError(f"runner.resume_from: {self.path} is held by another run starting at the same time")

    def _refuse_or_clear(self, host: str) -> None:
        """Refuse if the lock's holder may still run; remove the lock if it is gone (this host, pid not running)."""
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            holder = {}
        pid, where, since = holder.get("pid"), holder.get("host"), holder.get("since", "?")
        if where == host and isinstance(pid, int) and not _running(pid):
            print(f"{self.path}: the run that held it (pid {pid}, since {since}) is gone; taking it over")
            self.path.unlink(missing_ok=True)
            return
        raise ConfigError(
            f"runner.resume_from: {self.path.parent} is in use by another run (pid {pid} on host {where}, since "
            f"{since}); two runs in one run dir would overwrite each other's checkpoints. Wait for it, stop it, or "
            f"if it is gone (another host's run that was killed) delete {self.path}")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True

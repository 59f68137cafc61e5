"""Write files atomically: into a temp file beside the target, renamed onto it only on success.

A crash or an error mid-write leaves the previous file (or none), never half of one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield ``path.tmp`` to write to; on a clean exit it replaces ``path``, on an error it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a fresh temp folder beside ``path``; on a clean exit it becomes ``path`` (replacing it).

    The temp name carries the process id, so two processes building the same folder never share
    one; the loser of the final rename finds ``path`` complete and keeps it.
    """
    import shutil

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

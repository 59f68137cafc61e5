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

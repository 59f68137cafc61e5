"""Write files atomically: into a temp file beside the target, fsynced, renamed onto it only on success.

A crash or an error mid-write leaves the previous file (or none), never half of one; a power cut
after the rename leaves the new one (the data and the rename are on disk before we return).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
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
        fsync_tree(tmp)
        os.replace(tmp, path)
        fsync_tree(path.parent, recursive=False)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a fresh temp folder beside ``path``; on a clean exit it becomes ``path`` (replacing it).

    The temp name carries the process id, so two processes building the same folder never share
    one; the last rename wins. A folder being replaced is renamed aside (``<name>.old.tmp<pid>``)
    before the new one takes its name and only then deleted, so ``path`` is always either the old
    folder whole or the new one whole, never a half-deleted one. A process killed in between leaves
    temp folders only, which ``remove_stale_temps`` clears.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    old = path.with_name(f"{path.name}.old.tmp{os.getpid()}")
    for leftover in (tmp, old):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        if path.exists():
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old.exists() and not path.exists():  # put the old folder back rather than leave none
                os.replace(old, path)
            raise
        fsync_tree(path.parent, recursive=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


TEMP_MARK = ".tmp"  # atomic_path and atomic_dir name their temp files <name>.tmp[<pid>]


def fsync_tree(path: Path, recursive: bool = True) -> None:
    """Flush a file, or a folder's entries (and, ``recursive``, everything under it), to disk."""
    if path.is_dir() and recursive:
        for child in path.rglob("*"):
            fsync_tree(child, recursive=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems cannot fsync a folder; the data files are what matter
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def remove_temp_files(folder: Path) -> list[Path]:
    """Remove what a killed atomic write left in ``folder`` (``*.tmp``, ``*.tmp<pid>``); returns them."""
    if not folder.is_dir():
        return []
    found = sorted(p for p in folder.iterdir() if re.fullmatch(r".+\.tmp\d*", p.name))
    for p in found:
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    return found


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temp folders that killed ``atomic_dir(path)`` writers left beside ``path``; returns them.

    Those named after a process that is still running (another writer of the same folder) stay.
    This process's own are removed: the caller is about to write, so none of them is in use.
    """
    if not path.parent.is_dir():
        return []
    name = re.compile(rf"{re.escape(path.name)}(?:\.old)?\.tmp(\d+)")
    found = []
    for p in sorted(path.parent.iterdir()):
        match = name.fullmatch(p.name)
        if match and not _running_elsewhere(int(match.group(1))):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
            found.append(p)
    return found


def _running_elsewhere(pid: int) -> bool:
    """Whether another process with this id is running (another user's counts too: it may be writing)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DiskFullError(OSError):
    """No space left where the run writes; the message names the path."""


def disk_full(exc: BaseException, path: Path) -> bool:
    """Whether ``exc``, raised writing under ``path``, means the disk is full.

    torch.save reports a full disk as a bare ``RuntimeError: [enforce fail at inline_container.cc]``,
    so a write failure with (nearly) nothing free counts too.
    """
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "No space left" in str(exc):
        return True
    try:
        folder = next(p for p in (path, *path.parents) if p.exists())
        return shutil.disk_usage(folder).free < 16 * 2**20
    except (OSError, StopIteration):
        return False


def free_mib(path: Path) -> float | None:
    """MiB free on the filesystem of ``path`` (or of its nearest existing parent); None if unknown."""
    try:
        folder = next(p for p in (path, *path.parents) if p.exists())
        return shutil.disk_usage(folder).free / 2**20
    except (OSError, StopIteration):
        return None


def disk_full_error(what: str, path: Path, exc: BaseException, needed_bytes: int | None = None) -> DiskFullError:
    """The ``DiskFullError`` for ``exc``, raised writing ``what`` (e.g. "dataset") to ``path``: it names the
    path, the space free there now and, when the caller knows it, about how much the write needs."""
    free = free_mib(path)
    room = f"{free:.0f} MiB free" if free is not None else "free space unknown"
    if needed_bytes:
        room += f", about {needed_bytes / 2**20:.0f} MiB needed"
    return DiskFullError(f"no space left on device writing {what} {path} ({room}); nothing was written there: "
                         f"free some space or write elsewhere ({exc})")

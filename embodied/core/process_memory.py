"""Memory of a process and of this machine: a process's resident size, the memory available.

A foundation module (it imports nothing of ours), so that the Ray channel's mailbox actors, the
backends in ``embodied.backends`` and the workers all read memory without importing each
other: ``process_rss_mib`` once lived in ``placement.py``, and the channel that
``placement`` builds on imported it back from there, an import circle.
"""

from __future__ import annotations

import os


def process_rss_mib(pid: int | str = "self") -> float | None:
    """The resident memory of process ``pid`` (this one by default) in MiB, from ``/proc``; None where unknown."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def memory_available_mib() -> float:
    """This machine's available memory in MiB (``MemAvailable``: free plus what the kernel can reclaim)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (ValueError, OSError, AttributeError):
        return float("inf")  # unknown: not checked

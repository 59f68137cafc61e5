"""Where workers run: ``local`` (this process, a thread per worker) or ``ray`` (one actor each).

Worker classes are plain Python; a backend wraps them in a ``WorkerGroup`` whose calls return
handles, so the runner drives both backends with the same code::

    group = backend.create(EnvWorker, [(0, cfg, link0, seed), (1, cfg, link1, seed)])
    handles = group.call("run_epoch", 16)      # every rank, concurrently
    results = backend.wait(handles)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embodied.backends.base import ActorLostError, Backend, ClusterLostError, WorkerGroup, WorkerLostError
from embodied.backends.local import LocalBackend, LocalGroup, without_frames
from embodied.backends.ray_backend import RayBackend, RayGroup, check_reachable
from embodied.backends.user_code import user_packages
from embodied.config import ClusterConfig
from embodied.core.process_memory import process_rss_mib  # where callers of the workers' memory found it before

__all__ = ["ActorLostError", "Backend", "ClusterLostError", "WorkerLostError", "LocalBackend", "LocalGroup", "RayBackend", "RayGroup",
           "WorkerGroup", "check_reachable", "make_backend", "process_rss_mib", "user_packages", "without_frames"]


def make_backend(cluster: ClusterConfig, user_code: Sequence[Path] = ()) -> Backend:
    """The backend ``cluster.backend`` names; a Ray one ships ``user_code`` (``user_packages(cfg)``: the user's own
    modules the run's config names) to its workers beside embodied."""
    return RayBackend(cluster, user_code) if cluster.backend == "ray" else LocalBackend()

"""The Ray backend: every worker a Ray actor with a mailbox, on a Ray started for the run or an existing cluster."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied import CODE_ENV_VAR
from embodied.backends.base import ClusterLostError
from embodied.backends.snapshot import snapshot_package
from embodied.channels import Channel
from embodied.channels.ray_channel import NODE_METHOD, RSS_METHOD
from embodied.config import ClusterConfig, ConfigError
from embodied.config.schema import Resources
from embodied.core.process_memory import memory_available_mib


class RayGroup:
    """Ranks 0..n-1 of one worker class as Ray actors (in a placement group's bundles when it has one); a restart
    makes a new actor of the same remote class, so it runs the run's code too."""

    def __init__(self, remote: Any, actors: list[Any], on_new: Any = None, placement: Any = None) -> None:
        self.remote, self.actors, self._on_new, self.placement = remote, actors, on_new, placement

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args: Any) -> list[Any]:
        return [getattr(a, method).remote(*args) for a in self.actors]

    def call_each(self, method: str, args_per_rank: list[tuple]) -> list[Any]:
        return [getattr(a, method).remote(*args) for a, args in zip(self.actors, args_per_rank)]

    def restart(self, rank: int, args: tuple) -> None:
        """Kill rank ``rank``'s actor (a hung one too: its process goes) and start a new one."""
        import ray

        ray.kill(self.actors[rank], no_restart=True)
        self.actors[rank] = _in_bundle(self.remote, self.placement, rank).remote(*args)
        if self._on_new is not None:
            self._on_new(self.actors[rank])
        ray.get(self.actors[rank].__ray_ready__.remote())  # built (or its constructor's error raised) here

    def rss_mib(self) -> list[Any]:
        """Each actor's process resident memory (answered beside its running call: ``mailbox_actor``)."""
        return [getattr(a, RSS_METHOD).remote() for a in self.actors]

    def node_ids(self) -> list[Any]:
        """Handles of the Ray node id each actor runs on (answered beside its running call)."""
        return [getattr(a, NODE_METHOD).remote() for a in self.actors]


def _in_bundle(remote: Any, placement: Any, index: int) -> Any:
    """``remote`` scheduled into bundle ``index`` of placement group ``placement`` (or as it is, without one)."""
    if placement is None:
        return remote
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return remote.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement, placement_group_bundle_index=index))


class RayBackend:
    """Each worker a Ray actor; starts a local Ray for the run unless one is running or an address is given.

    Every actor runs the code of ``embodied`` as it was when the backend started (``snapshot.py``): an edit
    of the source tree during the run never reaches a worker started or replaced later. ``user_code``, the
    folders (or ``.py`` files) of the user's own modules that the config names (``user_code.py``), is uploaded
    beside it, so a cluster's nodes import them too.

    Waits are sliced (``POLL_S``): while nothing is done, the cluster's GCS port is checked between slices,
    so a cluster that goes away is noticed within seconds (``ClusterLostError``) instead of when Ray's
    own reconnection gives up and ends the process.
    """

    POLL_S = 5.0  # seconds between two checks that the cluster is still there, while waiting

    def __init__(self, cluster: ClusterConfig, user_code: Sequence[Path] = ()) -> None:
        import ray

        self.ray = ray
        self.cluster = cluster
        self._started = False
        if cluster.address is not None:
            check_reachable(cluster.address, cluster.connect_timeout_s)
        if not ray.is_initialized():
            env = {"env_vars": {k: os.environ[k] for k in ("MUJOCO_GL", "WANDB_MODE") if k in os.environ}}
            try:
                # "local": a new Ray for the run, never a cluster that a file in /tmp/ray still names
                # (after a killed run, ray.init() would wait on that dead address for minutes).
                ray.init(address=cluster.address or "local", include_dashboard=False, log_to_driver=True,
                         runtime_env=env)
            except ConnectionError as exc:  # "auto" and no cluster here, or a cluster that wants a token
                raise ConfigError(f"cluster.address: cannot join Ray at {cluster.address!r}: {exc} (a cluster "
                                  "started with token authentication also needs RAY_AUTH_MODE=token and its token, "
                                  "RAY_AUTH_TOKEN, in this process's environment)") from None
            self._started = True
        self.gcs_address = ray.get_runtime_context().gcs_address  # "host:port" of the cluster's head
        self.lost: str | None = None  # why the cluster is considered gone (then shutdown only disconnects)
        self._actors: list[Any] = []
        self._channels: list[Any] = []
        self._directory: Any = None  # the one directory actor of this backend's channels, started with the first
        self._placement_groups: list[Any] = []
        self.code = snapshot_package()  # the package every actor of the run imports
        self.runtime_env = {**uploaded_py_modules(self.code.package, *user_code),
                            "env_vars": {CODE_ENV_VAR: self.code.digest}}

    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> RayGroup:
        from embodied.channels.mailbox import mailbox_actor

        # Default num_cpus=0: the workers of one run share the machine; reserving a CPU each would
        # leave the actors of a small machine unscheduled. A mailbox: channels deliver into the worker.
        res = resources or Resources()
        remote = mailbox_actor(cls, num_cpus=res.num_cpus, num_gpus=res.num_gpus, resources=dict(res.resources),
                               runtime_env=self.runtime_env)
        placement = self._placement_group(cls, res, len(args_per_rank))
        actors = [_in_bundle(remote, placement, rank).remote(*args) for rank, args in enumerate(args_per_rank)]
        self._actors += actors
        return RayGroup(remote, actors, self._actors.append, placement)

    def _placement_group(self, cls: type, res: Resources, n: int) -> Any:
        """A placement group of ``n`` bundles of ``res`` with its strategy (None without ``res.group_strategy``);
        waits until the cluster has placed it, or fails naming the group and what it asked for."""
        if res.group_strategy is None or n == 0:
            return None
        from ray.util.placement_group import placement_group

        bundle = {k: v for k, v in {"CPU": res.num_cpus, "GPU": res.num_gpus, **res.resources}.items() if v}
        group = placement_group([bundle] * n, strategy=res.group_strategy.upper())
        ready, _ = self.ray.wait([group.ready()], timeout=self.cluster.connect_timeout_s)
        if not ready:
            self.ray.util.remove_placement_group(group)
            raise ConfigError(f"cluster.*_resources.group_strategy: the {cls.__name__} group's placement group ({n} x "
                              f"{bundle}, {res.group_strategy}) could not be placed on the cluster within "
                              f"cluster.connect_timeout_s={self.cluster.connect_timeout_s:g} s; its nodes have "
                              f"{self.ray.available_resources()}")
        self._placement_groups.append(group)
        return group

    def available(self) -> dict[str, float]:
        total = self.ray.cluster_resources()
        # A cluster's nodes report the memory Ray may schedule; a Ray of this machine has what the machine has free.
        cluster_mib = float(total.get("memory", 0.0)) / 2**20
        memory = memory_available_mib() if self.cluster.address is None else cluster_mib
        custom = {k: float(v) for k, v in total.items()
                  if k not in ("CPU", "GPU", "memory", "object_store_memory") and not k.startswith("node:")}
        return {**custom, "CPU": float(total.get("CPU", 0.0)), "GPU": float(total.get("GPU", 0.0)),
                "memory_mib": memory}

    def channel(self, name: str) -> Channel:
        from embodied.channels.ray_channel import RayChannel

        if self._directory is None:
            self._directory = RayChannel.directory(runtime_env=self.runtime_env)
        ch = RayChannel.create(name, directory=self._directory)
        self._channels.append(ch)
        return ch

    def release(self, group: RayGroup) -> None:
        if self.lost is not None:  # the actors went with the cluster; a kill would wait on it
            return
        for actor in group.actors:
            self.ray.kill(actor, no_restart=True)
        ids = {id(a) for a in group.actors}
        self._actors[:] = [a for a in self._actors if id(a) not in ids]  # in place: restarts append to it
        if group.placement is not None:
            self.ray.util.remove_placement_group(group.placement)
            self._placement_groups.remove(group.placement)
        group.actors = []

    def wait(self, handles: list[Any], timeout: float | None = None) -> list[Any]:
        if not handles:
            return []
        deadline = None if timeout is None else time.monotonic() + timeout
        unique = list(dict.fromkeys(handles))  # ray.wait refuses a ref listed twice
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            slice_s = self.POLL_S if left is None else min(self.POLL_S, left)
            _, pending = self.ray.wait(unique, num_returns=len(unique), timeout=slice_s, fetch_local=False)
            if not pending:
                # Every one is done: their results, or the first error. Checked first: a task ended by the loss of
                # the cluster has its error read from this node's object store, and Ray ends the process (no
                # Python exception) when that store has gone with the cluster.
                self.check_connected()
                return self.ray.get(handles)
            if left is not None and left <= 0:
                raise TimeoutError(f"{len(pending)} of {len(handles)} Ray tasks not done within {timeout} s")
            self.check_connected()

    def wait_any(self, handles: list[Any]) -> list[Any]:
        while True:  # a dead actor's task is ready, with its error
            ready, _ = self.ray.wait(handles, num_returns=1, timeout=self.POLL_S, fetch_local=False)
            if ready:
                return ready
            self.check_connected()

    def check_connected(self) -> None:
        """Raise ``ClusterLostError`` when the cluster's GCS port no longer accepts connections (tried twice, a
        second apart: a blip is not a loss)."""
        import socket

        host, _, port = self.gcs_address.rpartition(":")
        for attempt in range(2):
            try:
                socket.create_connection((host, int(port)), timeout=2.0).close()
                return
            except OSError as exc:
                error = exc
                if attempt == 0:
                    time.sleep(1.0)
        self.lost = f"the Ray cluster's head at {self.gcs_address} no longer accepts connections ({error})"
        raise ClusterLostError(self.lost)

    def died(self, exc: BaseException) -> bool:
        return isinstance(exc, self.ray.exceptions.RayActorError)

    def shutdown(self) -> None:
        if self.lost is None:  # with the cluster gone, these would wait on it
            for actor in self._actors:
                self.ray.kill(actor)
            if self._channels:  # they share one directory actor: closing one closes all
                self._channels[0].close()
            for group in self._placement_groups:
                self.ray.util.remove_placement_group(group)
        if self._started or self.lost is not None:
            self.ray.shutdown()


def uploaded_py_modules(package: Path, *more: Path) -> dict[str, list[str]]:
    """A ``runtime_env`` whose ``py_modules`` are ``package`` and ``more``, uploaded to the cluster now (their
    ``gcs://`` URIs).

    Ray takes a local folder in ``py_modules`` only at ``ray.init``, and then hashes and uploads it again for
    every actor: an edit in between would reach the later ones. Uploaded once, the URI names this content
    for the rest of the run, also when Ray was started by someone else (a test session, the user)."""
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    return upload_py_modules_if_needed({"py_modules": [str(p) for p in (package, *more)]}, include_gitignore=False,
                                       scratch_dir=str(package.parent))


def check_reachable(address: str, timeout_s: float) -> None:
    """Fail within ``timeout_s`` when the head at ``address`` ("host:port", or "ray://host:port")
    does not accept connections; ``ray.init`` itself would retry for minutes. "auto" is left to Ray."""
    import socket

    hostport = address.removeprefix("ray://")
    if hostport == "auto":
        return
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"cluster.address: {address!r} is not 'host:port' (or 'auto')")
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConfigError(f"cluster.address: cannot reach Ray at {address!r} within cluster.connect_timeout_s="
                              f"{timeout_s:g} s ({last}); start its head with `ray start --head --port {port}`, "
                              "or unset cluster.address to start a local Ray for the run")
        try:
            socket.create_connection((host, int(port)), timeout=min(left, 2.0)).close()
            return
        except OSError as exc:
            last = exc
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))

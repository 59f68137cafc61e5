"""Where workers run: ``local`` (this process, a thread per worker) or ``ray`` (one actor each).

Worker classes are plain Python; a backend wraps them in a ``WorkerGroup`` whose calls return
handles, so the runner drives both backends with the same code::

    group = backend.create(EnvWorker, [(0, cfg, link0, seed), (1, cfg, link1, seed)])
    handles = group.call("run_epoch", 16)      # every rank, concurrently
    results = backend.wait(handles)
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, Protocol

from embodied.channels import Channel, LocalChannel
from embodied.config import ClusterConfig, ConfigError
from embodied.config.schema import Resources


class WorkerGroup(Protocol):
    """Ranks 0..n-1 of one worker class."""

    def __len__(self) -> int: ...

    def call(self, method: str, *args: Any) -> list[Any]:
        """Start ``method(*args)`` on every rank; returns one handle per rank."""

    def call_each(self, method: str, args_per_rank: list[tuple]) -> list[Any]:
        """Start ``method`` on every rank with that rank's own arguments."""


class Backend(Protocol):
    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> WorkerGroup: ...
    def available(self) -> dict[str, float]:
        """What the workers can reserve: {"CPU": n, "GPU": n}."""
    def channel(self, name: str) -> Channel: ...
    def wait(self, handles: list[Any]) -> list[Any]: ...
    def wait_any(self, handles: list[Any]) -> list[Any]:
        """Block until at least one of ``handles`` is done (result or error); the done ones."""
    def shutdown(self) -> None: ...


class LocalGroup:
    """Workers as objects in this process, each built and called on its own thread, in order.

    A worker lives on one thread as a Ray actor lives in one process: thread-bound state such
    as an env's GL context is created and used on the same thread.
    """

    def __init__(self, cls: type, args_per_rank: list[tuple]) -> None:
        self._threads = [ThreadPoolExecutor(1, thread_name_prefix=f"{cls.__name__}{r}") for r in range(len(args_per_rank))]
        futures = [t.submit(cls, *a) for t, a in zip(self._threads, args_per_rank)]
        try:
            self.workers = [f.result() for f in futures]
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.workers)

    def call(self, method: str, *args: Any) -> list[Future]:
        return self.call_each(method, [args] * len(self.workers))

    def call_each(self, method: str, args_per_rank: list[tuple]) -> list[Future]:
        return [t.submit(_call_resolved, getattr(w, method), a)
                for w, t, a in zip(self.workers, self._threads, args_per_rank)]

    def close(self) -> None:
        for t in self._threads:
            t.shutdown(wait=False, cancel_futures=True)


def _call_resolved(fn: Any, args: tuple) -> Any:
    """Call ``fn`` with any Future among ``args`` replaced by its result, as Ray does with refs."""
    return fn(*(a.result() if isinstance(a, Future) else a for a in args))


class LocalBackend:
    """Everything in this process; channels are in-process queues."""

    def __init__(self) -> None:
        self._groups: list[LocalGroup] = []

    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> LocalGroup:
        group = LocalGroup(cls, args_per_rank)
        self._groups.append(group)
        return group

    def available(self) -> dict[str, float]:
        import torch

        return {"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count())}

    def channel(self, name: str) -> Channel:
        return LocalChannel(name)

    def wait(self, handles: list[Future]) -> list[Any]:
        return [h.result() for h in handles]

    def wait_any(self, handles: list[Future]) -> list[Future]:
        done, _ = futures_wait(handles, return_when=FIRST_COMPLETED)
        return list(done)

    def shutdown(self) -> None:
        for group in self._groups:
            group.close()


class RayGroup:
    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args: Any) -> list[Any]:
        return [getattr(a, method).remote(*args) for a in self.actors]

    def call_each(self, method: str, args_per_rank: list[tuple]) -> list[Any]:
        return [getattr(a, method).remote(*args) for a, args in zip(self.actors, args_per_rank)]


class RayBackend:
    """Each worker a Ray actor; starts a local Ray for the run unless one is running or an address is given."""

    def __init__(self, cluster: ClusterConfig) -> None:
        import ray

        self.ray = ray
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
        self._actors: list[Any] = []
        self._channels: list[Any] = []

    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> RayGroup:
        from embodied.channels.ray_channel import mailbox_actor

        # Default num_cpus=0: the workers of one run share the machine; reserving a CPU each would
        # leave the actors of a small machine unscheduled. A mailbox: channels deliver into the worker.
        res = resources or Resources()
        remote = mailbox_actor(cls, num_cpus=res.num_cpus, num_gpus=res.num_gpus)
        actors = [remote.remote(*args) for args in args_per_rank]
        self._actors += actors
        return RayGroup(actors)

    def available(self) -> dict[str, float]:
        total = self.ray.cluster_resources()
        return {"CPU": float(total.get("CPU", 0.0)), "GPU": float(total.get("GPU", 0.0))}

    def channel(self, name: str) -> Channel:
        from embodied.channels.ray_channel import RayChannel

        ch = RayChannel.create(name)
        self._channels.append(ch)
        return ch

    def wait(self, handles: list[Any]) -> list[Any]:
        return self.ray.get(handles)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        ready, _ = self.ray.wait(handles, num_returns=1)  # a dead actor's task is ready, with its error
        return ready

    def shutdown(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor)
        for ch in self._channels:
            ch.close()
        if self._started:
            self.ray.shutdown()


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


def make_backend(cluster: ClusterConfig) -> Backend:
    """The backend ``cluster.backend`` names."""
    return RayBackend(cluster) if cluster.backend == "ray" else LocalBackend()

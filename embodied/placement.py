"""Where workers run: ``local`` (this process, a thread per worker) or ``ray`` (one actor each).

Worker classes are plain Python; a backend wraps them in a ``WorkerGroup`` whose calls return
handles, so the runner drives both backends with the same code::

    group = backend.create(EnvWorker, [(0, cfg, link0, seed), (1, cfg, link1, seed)])
    handles = group.call("run_epoch", 16)      # every rank, concurrently
    results = backend.wait(handles)
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from typing import Any, Protocol

from embodied.channels import Channel, LocalChannel
from embodied.channels.ray_channel import NODE_METHOD, RSS_METHOD
from embodied.config import ClusterConfig, ConfigError
from embodied.config.schema import Resources


class WorkerGroup(Protocol):
    """Ranks 0..n-1 of one worker class."""

    def __len__(self) -> int: ...

    def call(self, method: str, *args: Any) -> list[Any]:
        """Start ``method(*args)`` on every rank; returns one handle per rank."""

    def call_each(self, method: str, args_per_rank: list[tuple]) -> list[Any]:
        """Start ``method`` on every rank with that rank's own arguments."""

    def restart(self, rank: int, args: tuple) -> None:
        """Replace rank ``rank`` (failed, dead or hung) by a new worker built from ``args``."""

    def rss_mib(self) -> list[Any]:
        """Handles of each rank's process resident memory in MiB ([] when the ranks are this process)."""


class Backend(Protocol):
    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> WorkerGroup: ...
    def available(self) -> dict[str, float]:
        """What the workers can reserve: {"CPU": n, "GPU": n, "memory_mib": MiB available now}, plus the cluster's
        custom resources by name (Ray)."""
    def channel(self, name: str) -> Channel: ...
    def wait(self, handles: list[Any], timeout: float | None = None) -> list[Any]:
        """Every handle's result (raises the first error); ``TimeoutError`` after ``timeout`` seconds."""
    def wait_any(self, handles: list[Any]) -> list[Any]:
        """Block until at least one of ``handles`` is done (result or error); the done ones."""
    def check_connected(self) -> None:
        """Raise ``ClusterLostError`` if the cluster the workers run on can no longer be reached."""
    def died(self, exc: BaseException) -> bool:
        """Whether ``exc`` (from ``wait``) says the worker's process died, rather than that its call raised."""
    def shutdown(self) -> None: ...


class ClusterLostError(RuntimeError):
    """The driver lost its connection to the Ray cluster its workers run on (the workers, and what they held,
    are gone with it); ``embodied.runner`` adds the run's last checkpoint and how to resume."""


class ActorLostError(RuntimeError):
    """An actor rank's process died (Ray): its policy shard, optimizer state and place in the process group are
    gone, so the update cannot go on; ``embodied.runner`` adds the run's last checkpoint and how to resume."""


CLOSE_TIMEOUT_S = 60.0  # how long a replaced local worker may take to close before it is left to itself


class _WorkerThread:
    """One daemon thread running submitted calls in order (a one-thread executor).

    Daemon, unlike ``ThreadPoolExecutor``'s threads: a worker stuck in a hung env step can be
    abandoned, and the process still exits (the interpreter does not join daemon threads).
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Future, Any, tuple] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.busy = False  # a call is running (a hung env step keeps it so)
        self._unfinished = 0  # calls submitted and not yet done (running or queued)
        self._lock = threading.Lock()
        self._thread.start()

    @property
    def idle(self) -> bool:
        """No call is running or waiting to run."""
        return self._unfinished == 0

    def submit(self, fn: Any, *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            self._unfinished += 1
        self._calls.put((future, fn, args))
        return future

    def _done(self) -> None:
        with self._lock:
            self._unfinished -= 1

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (after ``shutdown``)."""
        self._thread.join(timeout)

    def shutdown(self) -> None:
        """Cancel the calls not yet started and stop (a hung call keeps its thread; it is a daemon)."""
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                call[0].cancel()
                self._done()
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if not future.set_running_or_notify_cancel():
                self._done()
                continue
            self.busy = True
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                result, error = None, exc
            self.busy = False  # before the future is done: whoever waits on it sees the thread idle
            self._done()
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(without_frames(error))
            del call, future, fn, args, result, error  # hold nothing of the call while waiting for the next


class LocalGroup:
    """Workers as objects in this process, each built and called on its own thread, in order.

    A worker lives on one thread as a Ray actor lives in one process: thread-bound state such
    as an env's GL context is created and used on the same thread.
    """

    def __init__(self, cls: type, args_per_rank: list[tuple]) -> None:
        self._cls = cls
        self._threads = [_WorkerThread(f"{cls.__name__}{r}") for r in range(len(args_per_rank))]
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
        if method in getattr(self._cls, "concurrent_methods", ()):  # beside the worker's queued calls: run it here
            return [_done_future(getattr(w, method), a) for w, a in zip(self.workers, args_per_rank)]
        return [t.submit(_call_resolved, getattr(w, method), a)
                for w, t, a in zip(self.workers, self._threads, args_per_rank)]

    def restart(self, rank: int, args: tuple) -> None:
        """Replace rank ``rank`` by a new worker built from ``args``.

        An idle old worker (it raised) is closed first, on its own thread (an env's GL context is freed on
        the thread it belongs to; left to the garbage collector, its watchdog thread would keep it, envs and
        GL contexts included, alive for good), and the new one is built on that same thread: a new thread
        per restart would also get a new malloc arena, which keeps what it freed. A hung one cannot be:
        Python has no way to stop a thread stuck in an env step, so it is abandoned on its thread, keeps
        what it holds until it returns, and never blocks exit; the new worker gets a new thread.
        """
        old, thread = self.workers[rank], self._threads[rank]
        if thread.idle:
            if callable(getattr(old, "close", None)):
                try:
                    thread.submit(old.close).result(timeout=CLOSE_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - a failed worker may fail to close too; it is replaced anyway
                    print(f"{self._cls.__name__} {rank}: closing the replaced worker failed: {exc!r}",
                          file=sys.stderr, flush=True)
            self.workers[rank] = None  # the old one goes before the new one is built
            del old
            self.workers[rank] = thread.submit(self._cls, *args).result()
            return
        thread.shutdown()
        thread = _WorkerThread(f"{self._cls.__name__}{rank}")
        self.workers[rank] = thread.submit(self._cls, *args).result()
        self._threads[rank] = thread

    def rss_mib(self) -> list[Future]:
        """[]: the workers are threads of this process, whose resident memory the driver's covers."""
        return []

    def close(self, join_s: float = 10.0) -> None:
        """Stop every thread and wait (``join_s`` in all) for the idle ones to end, so that none is still
        on its way out while the interpreter shuts down; one stuck in a call (a hung env) is left."""
        for t in self._threads:
            t.shutdown()
        deadline = time.monotonic() + join_s
        for t in self._threads:
            if not t.busy:
                t.join(max(deadline - time.monotonic(), 0))


def _done_future(fn: Any, args: tuple) -> Future:
    """A future already holding ``fn(*args)``'s result or error (a call made in the caller's thread)."""
    future: Future = Future()
    try:
        future.set_result(_call_resolved(fn, args))
    except Exception as exc:  # noqa: BLE001 - handed to whoever waits on the future, as a worker thread would
        future.set_exception(without_frames(exc))
    return future


def without_frames(error: BaseException) -> BaseException:
    """``error`` with the local variables of its traceback's finished frames (and of its causes' and contexts')
    cleared; file, line and function stay, so it prints as before.

    Why: a worker's exception reaches the driver with its traceback, whose frames hold the worker (``self``), its
    envs and the exception again, a cycle that only Python's rare full collections free. A soak that forced an
    env fault every 75 s kept up to five replaced workers' envs alive that way (one set of 32 Reach envs, with
    their 13 MiB MjData arenas, each); a Ray worker's error crosses a process boundary and carries no frames.
    """
    seen: set[int] = set()
    pending = [error]
    while pending:
        exc = pending.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)  # skips a frame still running (this thread's own)
        pending += [exc.__cause__, exc.__context__]
    return error


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

        return {"CPU": float(os.cpu_count() or 1), "GPU": float(torch.cuda.device_count()),
                "memory_mib": memory_available_mib()}

    def channel(self, name: str) -> Channel:
        return LocalChannel(name)

    def wait(self, handles: list[Future], timeout: float | None = None) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        return [h.result(None if deadline is None else max(deadline - time.monotonic(), 0)) for h in handles]

    def wait_any(self, handles: list[Future]) -> list[Future]:
        done, _ = futures_wait(handles, return_when=FIRST_COMPLETED)
        return list(done)

    def check_connected(self) -> None:
        pass  # the workers are threads of this process

    def died(self, exc: BaseException) -> bool:
        return False  # a thread of this process cannot die alone

    def shutdown(self) -> None:
        for group in self._groups:
            group.close()


class RayGroup:
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

    Waits are sliced (``POLL_S``): while nothing is done, the cluster's GCS port is checked between slices,
    so a cluster that goes away is noticed within seconds (``ClusterLostError``) instead of when Ray's
    own reconnection gives up and ends the process.
    """

    POLL_S = 5.0  # seconds between two checks that the cluster is still there, while waiting

    def __init__(self, cluster: ClusterConfig) -> None:
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
        self._placement_groups: list[Any] = []

    def create(self, cls: type, args_per_rank: list[tuple], resources: Resources | None = None) -> RayGroup:
        from embodied.channels.ray_channel import mailbox_actor

        # Default num_cpus=0: the workers of one run share the machine; reserving a CPU each would
        # leave the actors of a small machine unscheduled. A mailbox: channels deliver into the worker.
        res = resources or Resources()
        remote = mailbox_actor(cls, num_cpus=res.num_cpus, num_gpus=res.num_gpus, resources=dict(res.resources))
        placement = self._placement_group(cls, res, len(args_per_rank))
        actors = [_in_bundle(remote, placement, rank).remote(*args) for rank, args in enumerate(args_per_rank)]
        self._actors += actors
        return RayGroup(remote, actors, self._actors.append, placement)

    def _placement_group(self, cls: type, res: Resources, n: int) -> Any:
        """A placement group of ``n`` bundles of ``res`` with its strategy (None without ``res.placement``);
        waits until the cluster has placed it, or fails naming the group and what it asked for."""
        if res.placement is None or n == 0:
            return None
        from ray.util.placement_group import placement_group

        bundle = {k: v for k, v in {"CPU": res.num_cpus, "GPU": res.num_gpus, **res.resources}.items() if v}
        group = placement_group([bundle] * n, strategy=res.placement.upper())
        ready, _ = self.ray.wait([group.ready()], timeout=self.cluster.connect_timeout_s)
        if not ready:
            self.ray.util.remove_placement_group(group)
            raise ConfigError(f"cluster.*_resources.placement: the {cls.__name__} group's placement group ({n} x "
                              f"{bundle}, {res.placement}) could not be placed on the cluster within "
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

        ch = RayChannel.create(name)
        self._channels.append(ch)
        return ch

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
            for ch in self._channels:
                ch.close()
            for group in self._placement_groups:
                self.ray.util.remove_placement_group(group)
        if self._started or self.lost is not None:
            self.ray.shutdown()


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

"""The local backend: every worker an object of this process, built and called on a daemon thread of its own."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from typing import Any

from embodied.channels import Channel, LocalChannel
from embodied.config.schema import Resources
from embodied.core.process_memory import memory_available_mib


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

    def release(self, group: LocalGroup) -> None:
        group.close()
        self._groups = [g for g in self._groups if g is not group]

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

"""Env worker failures: a watchdog for hung env steps, what a failure is, what counts as restartable.

An env worker fails in three ways, each seen within seconds:

- an env raises (``EnvError``, with the env's own traceback): its call returns the error;
- its process dies (Ray: a segfault, an abort, a kill): Ray reports the actor's death;
- an env step or reset runs past ``env.step_timeout_s``: the worker's ``StepWatch`` thread sends an
  ``EnvStepTimeoutError`` (with the stack the env is stuck in) to the rollout workers, which raise it.

``Workers`` then replaces the failed worker and redoes the rollout epoch from the state every
worker had at its start (``embodied.workers.restarts`` says how often, how soon, and when an env is broken for
good; see ``embodied.workers.group``).

A fault that comes back on that exact replay (``same_fault``: the same worker, env, place in the
epoch and exception: ``WorkerFailure.signature``) is a deterministic bug of the env from that state;
replaying it again would only repeat it, so the failed worker's envs restart from fresh seeds instead.
In eval (``Evaluator._round``) their episodes of that round are then left out (an episode from another
seed is not the same eval) and reported as ``episodes_dropped``; the other workers' stay the fixed ones.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from embodied.config import EnvConfig
from embodied.core.numerics import NonFiniteError
from embodied.core.types import EnvStepTimeoutError, find_env_error


class StepWatch:
    """Watches one env worker's env calls from a daemon thread.

    ``watching(venv, ...)`` marks a call in progress; when it (or, for a ``ChunkedVectorEnv``, the
    env step it is in: ``venv.progress``) runs past ``timeout_s``, ``on_hang`` gets an
    ``EnvStepTimeoutError`` once, naming the env index, sub-step and the stack the env is stuck in.
    """

    def __init__(self, timeout_s: float | None, env_id: str, worker_rank: int,
                 on_hang: Callable[[EnvStepTimeoutError], None]) -> None:
        self.timeout_s, self.env_id, self.worker_rank, self.on_hang = timeout_s, env_id, worker_rank, on_hang
        self._call: tuple[float, Any, int, str, int] | None = None  # (start, venv, first env, context, thread)
        self._stop = threading.Event()
        if timeout_s is not None:
            threading.Thread(target=self._watch, name=f"StepWatch{worker_rank}", daemon=True).start()

    @contextmanager
    def watching(self, venv: Any, first_env: int, context: str) -> Iterator[None]:
        """Time the env call(s) inside the block; ``first_env`` is the global index of ``venv``'s env 0."""
        self._call = (time.monotonic(), venv, first_env, context, threading.get_ident())
        try:
            yield
        finally:
            self._call = None

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        assert self.timeout_s is not None
        fired: tuple | None = None
        while not self._stop.wait(min(1.0, self.timeout_s / 4)):
            call = self._call
            if call is None or call is fired:
                continue
            error = self._overdue(call)
            if error is not None:
                fired = call  # once per call: the worker is replaced, never asked to go on
                self.on_hang(error)

    def _overdue(self, call: tuple[float, Any, int, str, int]) -> EnvStepTimeoutError | None:
        started, venv, first_env, context, thread = call
        progress = getattr(venv, "progress", None)  # ChunkedVectorEnv: the env call in progress
        if progress is not None and progress[0] >= started:
            since, index, sub_step = progress[:3]
            call = progress[3] if len(progress) > 3 else "reset" if sub_step < 0 else "step"  # or "render"
            during = f"{call}() at sub-step {sub_step} of the chunk" if sub_step >= 0 else f"{call}()"
        else:  # a batched env of the user's: only the whole call is known
            since, index, during = started, 0, f"{type(venv).__name__}.chunk_step() (which of its envs is unknown)"
        if time.monotonic() - since <= self.timeout_s:
            return None
        frame = sys._current_frames().get(thread)  # noqa: SLF001 - the only way to see another thread's stack
        stack = "".join(traceback.format_stack(frame)[-12:]) if frame is not None else "(the thread is gone)\n"
        return EnvStepTimeoutError(
            self.env_id, first_env + index, f"{during} within env.step_timeout_s={self.timeout_s:g} s", stack,
            f"env worker {self.worker_rank}, {context}", self.worker_rank)


@dataclass
class WorkerFailure(Exception):
    """Env workers of one group failed during an exchange; ``cause`` is the first failure's error.

    ``ranks`` are every env worker that raised, died or hung (``hung``: still running, so it can only
    be abandoned or killed); the rollout workers of the exchange have returned.
    """

    section: str  # "env" (training) or "eval_env"
    env_id: str
    ranks: set[int]
    cause: BaseException
    hung: set[int] = field(default_factory=set)
    envs: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> its global env index range [a, b)
    reproduce: str = ""  # the `embodied check-env` command that runs this env outside training

    def __str__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """One line: which worker, how it failed, and the first line of the cause."""
        rank = min(self.ranks)
        a, b = self.envs.get(rank, (0, 0))
        how = "hung" if rank in self.hung else "died" if died(self.cause) else "raised"
        return f"{self.section} worker {rank} ({self.env_id}, envs {a}-{b - 1}) {how}: {summary(self.cause)}"

    @property
    def signature(self) -> tuple:
        """What two failures share when they are the same fault: the worker, and for an env error the env
        index, the call, where in the epoch (iteration, chunk step) and the exception's last line (with
        memory addresses blanked: a replacement process puts objects elsewhere); a dead process has only
        its worker."""
        rank = min(self.ranks)
        env_error = find_env_error(self.cause)
        if env_error is None:
            return (self.section, rank, "died" if died(self.cause) else type(self.cause).__name__)
        lines = [line for line in env_error.env_traceback.strip().splitlines() if line.strip()]
        last = "hang" if isinstance(env_error, EnvStepTimeoutError) or not lines else lines[-1].strip()
        return (self.section, rank, env_error.index, env_error.during, env_error.context,
                re.sub(r"0x[0-9a-fA-F]+", "0x?", last))

    @property
    def call(self) -> str:
        """How the worker failed, wherever it was: the env call that raised or hung ("raised in step()",
        "hung in reset()"), or "died" (its process); two failures of a worker that fails from any state share it."""
        env_error = find_env_error(self.cause)
        if env_error is None:
            return "died" if died(self.cause) else f"raised {type(self.cause).__name__}"
        during = env_error.during  # "step() at sub-step 2 of the chunk", "reset(seed=3)", "construction"
        name = f"{during.split('(')[0].split()[-1]}()" if "(" in during else during
        return f"{'hung' if isinstance(env_error, EnvStepTimeoutError) else 'raised'} in {name}"

    @property
    def restartable(self) -> bool:
        """An env that raised, hung or whose process died; not an env that returned non-finite numbers
        (a bug of the env or task that a restart from the same state would only repeat)."""
        if died(self.cause):
            return True
        env_error = find_env_error(self.cause)
        return env_error is not None and not isinstance(env_error, NonFiniteError)


def summary(exc: BaseException) -> str:
    """One line: an env error's where and its exception (the traceback's last line), else the error's first line."""
    env_error = find_env_error(exc)
    if env_error is not None:
        lines = [line for line in env_error.env_traceback.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines and not isinstance(env_error, EnvStepTimeoutError) else ""
        where = f"env index {env_error.index}" + (f", {env_error.context}" if env_error.context else "")
        verb = "hung in" if isinstance(env_error, EnvStepTimeoutError) else "raised during"
        return f"{verb} {env_error.during} ({where})" + (f": {last}" if last else "")
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def died(exc: BaseException) -> bool:
    """A Ray actor that died (its process exited or was killed), without importing ray."""
    return any(c.__name__ == "RayActorError" for c in type(exc).__mro__)


def is_hang(exc: BaseException) -> EnvStepTimeoutError | None:
    """The ``EnvStepTimeoutError`` behind ``exc`` (itself, or the cause of a Ray task error)."""
    found = find_env_error(exc)
    return found if isinstance(found, EnvStepTimeoutError) else None




def check_env_command(env: EnvConfig, steps: int = 1000) -> str:
    """The ``embodied check-env`` command line that builds and steps ``env``'s env as the env workers do (a
    mixture: one for each member, joined by ``;``)."""
    if len(env.members()) > 1:
        return "; ".join(check_env_command(env.member(env_id), steps) for env_id in env.members())
    parts = ["embodied", "check-env", env.id, "--obs-mode", env.obs_mode, "--max-episode-steps",
             str(env.max_episode_steps), "--steps", str(steps)]
    if env.kwargs:
        parts += ["--kwargs", json.dumps(env.kwargs)]
    return shlex.join(parts)

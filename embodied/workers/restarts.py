"""How many env worker restarts a run allows, how long a rebuild waits, and when an env is broken for good.

``runner.faults.max_worker_restarts`` is a rate, not a lifetime count: at most that many restarts within any
``runner.faults.restart_window`` iterations, training and eval env workers together (``RestartWindow``), and, if set,
at most ``runner.faults.max_total_restarts`` in the run. A run of hours with a fault an hour never runs out; a burst
of faults stops it. A worker rebuilt again within the window of its last rebuild first waits (``Backoff``:
``runner.faults.restart_backoff_s``, doubled for each further one, at most ``runner.faults.restart_backoff_max_s``), so a
flapping resource (a GL context, a license server, a full disk) gets time to recover.

A worker whose rebuilt processes keep failing the same way has an env that fails from any state
(``BrokenEnvWatch``); the run stops at once with that diagnosis instead of spending its window on it.

Either stop is a ``FaultStop``, which ``Workers.rollout`` gives the state every worker had at the start of the
failed epoch, so that the runner checkpoints the last completed iteration before it stops. ``RestartBudget``
puts the three together; its ``state_dict`` goes into checkpoints, so a resumed run counts on where it stopped.

    budget = RestartBudget(3, window=20)
    restart = budget.restart(failure, iteration=7, replayed=False)  # or raises FaultStop (or the cause)
    budget.announce(failure, "iteration 7", restart)  # prints one line, then waits restart.wait_s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from embodied.config import RunnerConfig
from embodied.workers.faults import WorkerFailure


class FaultStop(RuntimeError):
    """Env worker faults stopped the run; ``str()`` ends with the last failure's own error (the env's traceback).

    ``state``: every env worker's envs and rollout worker's RNG at the start of the failed rollout epoch
    (``Workers.resume_state``'s format), set by ``Workers.rollout`` for the runner's last checkpoint; None for
    a fault in eval, which never stops training.
    """

    def __init__(self, message: str, last_failure: str = "") -> None:
        super().__init__(message, last_failure)
        self.state: dict[str, Any] | None = None

    def __str__(self) -> str:
        message, last = self.args[0], self.args[1] if len(self.args) > 1 else ""
        return f"{message}\nThe last failure: {last}" if last else message


class RestartRateError(FaultStop):
    """Faults came faster than ``runner.faults.max_worker_restarts`` within ``runner.faults.restart_window`` iterations, or the
    run reached ``runner.faults.max_total_restarts``."""


class BrokenEnvError(FaultStop):
    """An env worker's rebuilt processes keep failing the same way: its env fails from any state."""


@dataclass
class RestartWindow:
    """At most ``limit`` restarts within any ``window`` consecutive iterations, and ``cap`` in the run (None: none)."""

    limit: int
    window: int = 20
    cap: int | None = None
    total: int = 0  # restarts in the run
    recent: list[int] = field(default_factory=list)  # the iteration of each restart of the last ``window`` iterations

    def __post_init__(self) -> None:  # built by code too, not only from a checked config
        if self.limit < 0:
            raise ValueError(f"runner.faults.max_worker_restarts: must be >= 0 (0: no restarts), got {self.limit}")
        if self.window < 1:
            raise ValueError(f"runner.faults.restart_window: must be >= 1, got {self.window}")
        if self.cap is not None and self.cap < 0:
            raise ValueError(f"runner.faults.max_total_restarts: must be >= 0 (or None: no cap), got {self.cap}")

    def count(self, iteration: int) -> int:
        """Restarts within the window that ends at ``iteration``."""
        return sum(i > iteration - self.window for i in self.recent)

    def refusal(self, iteration: int) -> str | None:
        """Why one more restart at ``iteration`` is refused, or None."""
        if self.cap is not None and self.total >= self.cap:
            return f"the run already restarted env workers {self.total} times (runner.faults.max_total_restarts={self.cap})"
        if self.limit == 0:
            return "runner.faults.max_worker_restarts=0 allows no restart"
        if self.count(iteration) >= self.limit:
            at = ", ".join(str(i) for i in self.recent if i > iteration - self.window)
            return (f"faults came faster than runner.faults.max_worker_restarts={self.limit} within runner.faults.restart_window="
                    f"{self.window} iterations (restarts at iterations {at}; {self.total} in the run)")
        return None

    def add(self, iteration: int) -> None:
        self.total += 1
        self.recent = [i for i in self.recent if i > iteration - self.window] + [iteration]


@dataclass
class Backoff:
    """How long a worker's rebuild waits: nothing for its first rebuild in ``within`` iterations, then ``base_s``,
    doubled for each further rebuild that comes within ``within`` iterations of the one before, at most ``max_s``."""

    base_s: float
    max_s: float
    within: int
    last: dict[str, list[int]] = field(default_factory=dict)  # worker -> [iteration of its last rebuild, in a row]
    waited_s: float = 0.0  # in the run

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.max_s:
            raise ValueError(f"runner.faults.restart_backoff_max_s: must be >= runner.faults.restart_backoff_s >= 0, got "
                             f"{self.max_s} and {self.base_s}")

    def delay(self, worker: str, iteration: int) -> tuple[float, int]:
        """Seconds to wait before rebuilding ``worker`` at ``iteration``, and how many rebuilds in a row this one
        follows; the rebuild is noted."""
        prev = self.last.get(worker)
        streak = prev[1] + 1 if prev is not None and iteration - prev[0] < self.within else 0
        self.last[worker] = [iteration, streak]
        return (0.0 if streak == 0 else min(self.max_s, self.base_s * 2.0 ** min(streak - 1, 64))), streak


@dataclass
class Streak:
    """One worker's failures of one kind in a row, each within the watch's horizon of the one before."""

    call: str  # how it failed (``WorkerFailure.call``): "raised in step()", "hung in reset()", "died"...
    iterations: list[int]  # of each failure (each caused a rebuild)
    fresh: bool = False  # the last rebuild started the worker's envs from fresh seeds
    strikes: int = 0  # failures of processes rebuilt from fresh seeds: no single state explains them


@dataclass
class BrokenEnvWatch:
    """Tells an env that fails from any state from one that failed in one state.

    A failure extends its worker's streak when it is the same kind (``WorkerFailure.call``) within ``within``
    iterations of the failure before. It is a strike when the process that failed was rebuilt from fresh seeds
    (after a fault that replayed, or after a first strike): no single state explains it. Failures after an exact
    rebuild are no strike (the same state again, or a transient fault: a burst of those is the rate's business),
    nor is a fault known to replay from the fixed state it met again (``explained``: an eval episode that always
    fails). A first strike's rebuild uses fresh seeds at once (an exact replay would prove nothing more); a
    second strike in a row means the env fails from any state.
    """

    within: int | None  # None: no diagnosis (every failure starts a streak)
    streaks: dict[str, Streak] = field(default_factory=dict)  # worker -> its streak

    def judge(self, worker: str, failure: WorkerFailure, iteration: int, explained: bool = False) -> Streak:
        """The streak ``failure`` extends or starts, with it counted (``record`` keeps it once rebuilt)."""
        prev = self.streaks.get(worker)
        if (prev is None or self.within is None or prev.call != failure.call
                or iteration - prev.iterations[-1] > self.within):
            return Streak(failure.call, [iteration])
        strike = prev.fresh and not explained
        return Streak(prev.call, [*prev.iterations, iteration], strikes=prev.strikes + strike)

    def record(self, worker: str, streak: Streak, fresh: bool) -> None:
        streak.fresh = fresh
        self.streaks[worker] = streak

    @staticmethod
    def broken(streak: Streak) -> bool:
        return streak.strikes >= 2


@dataclass
class Restart:
    """An allowed restart: the run's restart count after it, the window's, and how the failed ranks come back."""

    number: int
    in_window: int
    fresh: bool  # their envs start from fresh seeds: the fault replayed, or it is a first sign of a broken env
    replayed: bool  # it is the same fault as the exact replay's before (or one known to replay)
    suspect: bool  # a rebuilt process failed alike again (``BrokenEnvWatch``): a first sign of a broken env
    wait_s: float  # backoff before the rebuild
    quick: int  # rebuilds of the worker in a row within the window before this one (the backoff's exponent + 1)


class RestartBudget:
    """The run's env worker restarts, shared by training and eval env workers: how many (``RestartWindow``), how
    soon (``Backoff``), and when an env is broken (``BrokenEnvWatch``); ``episodes_dropped`` counts the training
    episodes given up on faults that replayed (``env/episodes_dropped``). ``sleep`` waits the backoff (tests
    inject a clock)."""

    def __init__(self, limit: int, window: int = 20, cap: int | None = None, backoff_s: float = 0.0,
                 backoff_max_s: float = 0.0, broken_within: int | None = 5,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.window = RestartWindow(limit, window, cap)
        # max: code that gives only a base gets a constant wait (a config's cap below its base is refused)
        self.backoff = Backoff(backoff_s, max(backoff_s, backoff_max_s), window)
        self.watch = BrokenEnvWatch(broken_within)
        self.sleep = sleep
        self.episodes_dropped = 0
        self.explained = False  # why a replayed fault drops episodes was printed (once a run)

    @classmethod
    def of(cls, runner: RunnerConfig) -> RestartBudget:
        r = runner.faults
        return cls(r.max_worker_restarts, r.restart_window, r.max_total_restarts, r.restart_backoff_s,
                   r.restart_backoff_max_s, r.broken_env_iterations)

    @property
    def used(self) -> int:
        """Restarts in the run (``workers/restarts``)."""
        return self.window.total

    def restart(self, failure: WorkerFailure, iteration: int, replayed: bool, explained: bool = False) -> Restart:
        """Account one restart of ``failure`` at ``iteration``. ``replayed``: it is the same fault as the exact
        replay's before (``WorkerFailure.signature``), or (``explained``) one known to replay.

        Raises the failure's cause when it is not restartable, ``BrokenEnvError`` when the worker's env fails
        from any state (before the window is looked at: it would only be spent), ``RestartRateError`` when the
        window or the lifetime cap has no restart left.
        """
        failure.cause.__suppress_context__ = True  # raised as it is: the WorkerFailure wrapper is noise
        if not failure.restartable:
            raise failure.cause
        worker = f"{failure.section}{min(failure.ranks)}"
        streak = self.watch.judge(worker, failure, iteration, explained)
        if self.watch.broken(streak):
            raise BrokenEnvError(broken_diagnosis(failure, streak, self.watch.within), str(failure.cause))
        refused = self.window.refusal(iteration)
        if refused is not None:
            raise RestartRateError(f"iteration {iteration}: {failure.describe()}; not restarted: {refused}",
                                   str(failure.cause))
        self.window.add(iteration)
        fresh = replayed or streak.strikes > 0
        for rank in failure.ranks:
            self.watch.record(f"{failure.section}{rank}", streak, fresh)
        wait_s, quick = self.backoff.delay(worker, iteration)
        return Restart(self.used, self.window.count(iteration), fresh, replayed, streak.strikes > 0, wait_s, quick)

    def announce(self, failure: WorkerFailure, where: str, restart: Restart, fresh_seed: int | None = None,
                 dropped: int = 0) -> None:
        """Print the restart's one line (at ``where``: "iteration 7"), then wait its backoff. ``fresh_seed``: the
        failed ranks' envs restart from it and their ``dropped`` episodes in progress are given up."""
        head = (f"[restart {restart.number}; {restart.in_window}/{self.window.limit} within "
                f"{self.window.window} iterations] {where}: {failure.describe()}")
        wait = ""
        if restart.wait_s > 0:
            wait = (f"waiting {restart.wait_s:g} s first (rebuild {restart.quick + 1} of this worker in a row within "
                    f"runner.faults.restart_window; runner.faults.restart_backoff_s={self.backoff.base_s:g} doubling, at most "
                    f"runner.faults.restart_backoff_max_s={self.backoff.max_s:g}), then ")
        who = "it" if len(failure.ranks) == 1 else f"ranks {sorted(failure.ranks)}"
        if fresh_seed is not None and failure.section == "env":  # eval counts its own (``Evaluator.dropped``)
            self.episodes_dropped += dropped
        if fresh_seed is None:
            redo = f"the start of the {'rollout epoch' if failure.section == 'env' else 'eval round'}"
            print(f"{head}; {wait}replacing {who} and redoing from {redo}", file=sys.stderr, flush=True)
        else:
            print(f"{head}{self._fresh_reason(restart)}; {wait}replacing {who} with envs reset from "
                  f"fresh seeds (base {fresh_seed}) and {_lost(failure, dropped)}{self._why(failure, restart)}",
                  file=sys.stderr, flush=True)
        if restart.wait_s > 0:
            self.sleep(restart.wait_s)
            self.backoff.waited_s += restart.wait_s

    def _fresh_reason(self, restart: Restart) -> str:
        if not restart.suspect:
            return ", again on the exact replay"
        return (f", again in a process rebuilt within runner.faults.broken_env_iterations={self.watch.within} iterations "
                "(a first sign of an env that fails from any state: one more and the run stops)")

    def _why(self, failure: WorkerFailure, restart: Restart) -> str:
        """Why a replayed fault drops episodes, said once a run."""
        if self.explained or restart.suspect:
            return ""
        self.explained = True
        return (" (the same fault on the exact replay is a deterministic bug of the env from that state, e.g. a "
                "configuration that explodes or an object that falls through the table: replaying it again would only "
                "repeat it; " + ("the other workers still redo the epoch exactly, and env/episodes_dropped counts what "
                                 "is given up)" if failure.section == "env" else
                                 "the other workers still play their fixed eval episodes, and the eval reports the "
                                 "ones left out as episodes_dropped)"))

    def metrics(self, iteration: int) -> dict[str, float]:
        """``workers/restarts`` (in the run), ``workers/restarts_in_window`` (within the window ending at
        ``iteration``), ``workers/backoff_s`` (seconds waited before rebuilds, in the run)."""
        return {"workers/restarts": float(self.used), "workers/restarts_in_window": float(self.window.count(iteration)),
                "workers/backoff_s": float(self.backoff.waited_s)}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps, so a resumed run counts on where this one stopped (plain types only)."""
        return {"total": self.window.total, "recent": list(self.window.recent),
                "episodes_dropped": self.episodes_dropped,
                "backoff": {k: list(v) for k, v in self.backoff.last.items()}, "waited_s": self.backoff.waited_s,
                "streaks": {k: [s.call, list(s.iterations), s.fresh, s.strikes] for k, s in self.watch.streaks.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window.total, self.window.recent = int(state.get("total", 0)), [int(i) for i in state.get("recent", [])]
        self.episodes_dropped = int(state.get("episodes_dropped", 0))
        self.backoff.last = {k: [int(i) for i in v] for k, v in (state.get("backoff") or {}).items()}
        self.backoff.waited_s = float(state.get("waited_s", 0.0))
        streaks = (state.get("streaks") or {}).items()
        self.watch.streaks = {k: Streak(call, [int(i) for i in iterations], bool(fresh), int(strikes))
                              for k, (call, iterations, fresh, strikes) in streaks}


def _lost(failure: WorkerFailure, dropped: int) -> str:
    if dropped == 0:  # its envs already restarted from fresh seeds in this epoch or round
        return "giving up its episodes from fresh seeds in progress (already left out)"
    if failure.section == "env":
        return f"dropping its {dropped} episode(s) in progress"
    return (f"leaving its {dropped} eval episode(s) of this round out of the eval (an episode from another seed is "
            "not the same eval)")


def broken_diagnosis(failure: WorkerFailure, streak: Streak, within: int | None) -> str:
    """What ``BrokenEnvError`` says: the env, the call that failed, how many rebuilt processes failed alike, and
    how to reproduce it outside training."""
    rank = min(failure.ranks)
    a, b = failure.envs.get(rank, (0, 0))
    rebuilt = len(streak.iterations) - 1
    at = ", ".join(str(i) for i in streak.iterations)
    command = failure.reproduce or f"embodied check-env {failure.env_id}"
    return (f"{failure.section} worker {rank} ({failure.env_id}, envs {a}-{b - 1}) fails from any state: it "
            f"{streak.call} in {rebuilt + 1} processes in a row (failures at iterations {at}, each within "
            f"runner.faults.broken_env_iterations={within} of the one before): the {rebuilt} fresh processes rebuilt for it "
            f"(an exact replay, then envs reset from fresh seeds) failed the same way. No single state explains "
            f"that, so restarting it again would only spend runner.faults.max_worker_restarts. Next step: reproduce it "
            f"outside training with `{command}` (raise --steps until it fails) and fix the env")

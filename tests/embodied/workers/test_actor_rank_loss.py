"""When an actor rank's process dies, the ranks it shared a collective with fail too ("connection reset by peer"),
and Ray may report one of those failures before the death: the update is stopped naming the rank that died
(``Workers._actor_results``), not the echo in its peers."""

from __future__ import annotations

import time

import pytest

from embodied.backends import ActorLostError
from embodied.workers import group
from embodied.workers.group import Workers


class Died(RuntimeError):
    """What a fake backend's ``wait`` raises for a rank whose process died."""


class FakeBackend:
    """Ranks as names; ``outcomes[name]`` is (seconds after the start when it is done, what it gives or raises)."""

    def __init__(self, outcomes: dict[str, tuple[float, object]]) -> None:
        self.outcomes, self.start = outcomes, time.monotonic()

    def _ready(self, handle: str) -> bool:
        return time.monotonic() - self.start >= self.outcomes[handle][0]

    def wait_any(self, handles: list[str]) -> list[str]:
        while not any(self._ready(h) for h in handles):
            time.sleep(0.01)
        return [h for h in handles if self._ready(h)]

    def wait(self, handles: list[str], timeout: float | None = None) -> list[object]:
        end = None if timeout is None else time.monotonic() + timeout
        while not all(self._ready(h) for h in handles):
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(handles)
            time.sleep(0.01)
        for h in handles:
            if isinstance(self.outcomes[h][1], BaseException):
                raise self.outcomes[h][1]
        return [self.outcomes[h][1] for h in handles]

    def died(self, exc: BaseException) -> bool:
        return isinstance(exc, Died)


def workers(backend: FakeBackend) -> Workers:
    w = object.__new__(Workers)  # only the backend is needed to gather actor results
    w.backend = backend
    return w


def test_a_peers_collective_error_reported_first_names_the_rank_that_died():
    echo = RuntimeError("gloo: Read error [127.0.0.1]:9622: Connection reset by peer")
    backend = FakeBackend({"rank0": (0.3, Died("the process of rank 0 died")), "rank1": (0.0, echo)})
    with pytest.raises(ActorLostError, match=r"actor rank 0 of 2 died during the update of iteration 7 \(Died\)") as e:
        workers(backend)._actor_results(["rank0", "rank1"], "the update of iteration 7")
    assert e.value.__cause__ is echo  # the peer's error is kept as the cause


def test_a_rank_that_raised_with_no_peer_dead_raises_its_own_error(monkeypatch):
    monkeypatch.setattr(group, "PEER_DEATH_GRACE_S", 0.5)
    bug = ValueError("a bug in the learner")
    backend = FakeBackend({"rank0": (0.0, bug), "rank1": (60.0, {"loss": 1.0})})  # rank 1 still in its collective
    started = time.monotonic()
    with pytest.raises(ValueError, match="a bug in the learner"):
        workers(backend)._actor_results(["rank0", "rank1"], "the update of iteration 1")
    assert time.monotonic() - started < 5  # the grace, not the hung peer, bounds the wait


def test_a_death_reported_first_is_named_at_once():
    backend = FakeBackend({"rank0": (60.0, {"loss": 1.0}), "rank1": (0.0, Died("gone"))})
    with pytest.raises(ActorLostError, match=r"actor rank 1 of 2 died during the update of iteration 3"):
        workers(backend)._actor_results(["rank0", "rank1"], "the update of iteration 3")


def test_results_come_back_in_rank_order():
    backend = FakeBackend({"rank0": (0.05, {"loss": 0.0}), "rank1": (0.0, {"loss": 1.0})})
    assert workers(backend)._actor_results(["rank0", "rank1"], "x") == [{"loss": 0.0}, {"loss": 1.0}]

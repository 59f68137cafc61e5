"""What a backend is: the ``Backend`` and ``WorkerGroup`` protocols, and the errors that say a worker's
process or the cluster is gone. ``local.py`` and ``ray_backend.py`` implement them."""

from __future__ import annotations

from typing import Any, Protocol

from embodied.channels import Channel
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
    def release(self, group: WorkerGroup) -> None:
        """End ``group``'s workers now and free what they hold (Ray: kill its actors, whose processes go, hung ones
        too, and remove its placement group; local: stop its threads, a hung one left behind), while the backend's
        other groups go on: for evals that share one backend (``embodied eval --suites``, extra evals), so that
        each suite's workers go with it instead of at ``shutdown``."""
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
    are gone with it); ``embodied.runs.train`` adds the run's last checkpoint and how to resume."""


class WorkerLostError(RuntimeError):
    """A worker's process died (Ray) and the run cannot replace it (env workers are replaced; a rollout worker or an
    actor rank is not): ``embodied.runs.train`` stops, adding the run's last checkpoint and how to resume."""


class ActorLostError(WorkerLostError):
    """An actor rank's process died (Ray): its policy shard, optimizer state and place in the process group are
    gone, so the update cannot go on; ``embodied.runs.train`` adds the run's last checkpoint and how to resume."""

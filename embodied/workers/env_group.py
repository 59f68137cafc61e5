"""Env workers over one env config and the rollout side of their exchange (``EnvGroup``), and how the
driver waits on an exchange so that the first failure, wherever it happens, is seen at once
(``exchange``)."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from embodied.backends import Backend, ClusterLostError, WorkerGroup
from embodied.config import EnvConfig
from embodied.core.types import PeerFailure, PeerFailureError
from embodied.workers.faults import WorkerFailure, check_env_command, is_hang
from embodied.workers.link import Link


def exchange(backend: Backend, handles: list[Any], envs: EnvGroup, env_handles: list[Any]) -> list[Any]:
    """The results of ``handles`` (rollout workers' calls trading with ``envs``, whose own calls are
    ``env_handles``), watching both: the first failure is seen at once, wherever it happens.

    An env worker that raised, died (Ray: its process) or hung (its watchdog's ``EnvStepTimeoutError``,
    raised by the rollout workers it feeds) raises ``WorkerFailure`` once every other worker of the
    exchange has returned; nothing waits on a hung one. A rollout worker's own error is raised as it
    is. ``PeerFailureError`` is always a consequence (a worker stopped because its peer failed), so
    the error behind it is the one raised.
    """
    pending = {id(h): h for h in [*handles, *env_handles]}
    env_rank = {id(h): rank for rank, h in enumerate(env_handles)}
    while pending:
        for done in backend.wait_any(list(pending.values())):
            del pending[id(done)]
            try:
                backend.wait([done])
            except ClusterLostError:
                raise  # nothing more to ask of the workers (Ray: nor to put into the lost cluster's object store)
            except Exception as exc:
                if _peer_failure(exc):
                    continue  # the failure behind it shows up on another handle
                hang = is_hang(exc)
                rank = env_rank.get(id(done), hang.worker_rank if hang is not None else None)
                if rank is None:  # the rollout worker's own error: it told its env ranks ...
                    if backend.died(exc):  # ... unless its process died: then the driver does
                        envs.tell_env(f"a rollout worker died: {exc!r}")
                    _settle(backend, list(pending.values()))
                    raise
                hung = {rank} if hang is not None else set()
                if hang is None:  # a dead worker cannot tell its rollout ranks: the driver does
                    envs.tell_rollout(f"{envs.section} worker {rank} failed: {exc!r}")
                others = [h for h in pending.values() if env_rank.get(id(h)) not in hung]
                failed = {rank} | {env_rank[id(h)] for h in _settle(backend, others) if id(h) in env_rank}
                raise WorkerFailure(envs.section, envs.env_id, failed, exc, hung, envs.env_ranges(),
                                    check_env_command(envs.env_cfg)) from exc
    return backend.wait(handles)


def _peer_failure(exc: BaseException) -> bool:
    return isinstance(exc, PeerFailureError) or isinstance(getattr(exc, "cause", None), PeerFailureError)


def _settle(backend: Backend, handles: list[Any]) -> list[Any]:
    """Wait for ``handles`` to finish, whatever their outcome; the ones that failed on their own
    (not because a peer did)."""
    failed = []
    for h in handles:
        try:
            backend.wait([h])
        except ClusterLostError:
            raise
        except Exception as exc:  # noqa: BLE001 - consequences of the failure being raised
            if not _peer_failure(exc):
                failed.append(h)
    return failed


@dataclass
class EnvGroup:
    """Env workers over one env config, and each rollout rank's side of their exchange."""

    section: str  # "env" or "eval_env"
    env_id: str
    group: WorkerGroup
    env_args: list[tuple]  # each rank's constructor arguments (a restart builds its replacement from them)
    rollout_links: list[Link]  # one per rollout rank
    abandoned: set[int] = dataclasses.field(default_factory=set)  # hung ranks left running (never waited on)

    @property
    def env_cfg(self) -> EnvConfig:
        """The env config every rank builds its envs from."""
        return self.env_args[0][1]

    def tell_rollout(self, message: str) -> None:
        """Send every rollout rank a ``PeerFailure`` on each of its keys (for an env worker that died)."""
        for link in self.rollout_links:
            link.fail(link.to_rollout, PeerFailure(message))

    def tell_env(self, message: str) -> None:
        """Send every env rank a ``PeerFailure`` on each of its keys (for a rollout worker that died), so none waits
        out the channel's timeout for chunks that will not come."""
        for link in self.rollout_links:
            link.fail(link.to_env, PeerFailure(message))

    def env_ranges(self) -> dict[int, tuple[int, int]]:
        """Each rank's global env indices [first, last + 1)."""
        ranges = {}
        for rank, args in enumerate(self.env_args):
            link: Link = args[2]
            ranges[rank] = (link.start, link.start + link.num_envs)
        return ranges

    def replace(self, backend: Backend, rollout_group: WorkerGroup, failure: WorkerFailure,
                states: list[Any] | None, seed: int, fresh: dict[int, int] | None = None) -> None:
        """Replace ``failure.ranks`` by new workers and move the whole exchange to fresh channel keys.

        With ``states`` (each rank's ``get_state()``, as handles) every env worker's envs go back to
        them, but the ranks of ``fresh`` (rank -> seed: a fault that replayed), whose envs restart from
        that seed; without, the replaced ranks start from ``seed``. A hung local worker is abandoned
        (Python cannot stop a thread); on Ray its process is killed.
        """
        generation = self.rollout_links[0].generation + 1
        for link in self.rollout_links:
            link.move_to(generation)  # the driver's copy (on the local backend, the workers' own)
        for rank in sorted(failure.ranks):
            args = list(self.env_args[rank])
            args[2] = dataclasses.replace(args[2], generation=generation)
            self.env_args[rank] = tuple(args)
            args[3] = None  # no reset in the constructor: restore (or the eval round) sets the envs
            self.group.restart(rank, tuple(args))
        backend.wait(rollout_group.call("relink", self.section, generation))
        if states is None:
            backend.wait(self.group.call("relink", generation))
            return
        fresh = fresh or {}
        restored = backend.wait(self.group.call_each("restore", [
            ("fresh seeds: a fault replayed", generation, fresh[r]) if r in fresh else (state, generation, seed)
            for r, state in enumerate(states)]))
        if not all(ok for r, ok in enumerate(restored) if r not in fresh):
            warnings.warn(f"{self.section}: envs that do not pickle were reset from seed {seed} instead of "
                          f"restored; their episodes in progress are cut short", stacklevel=3)

    def close(self, backend: Backend) -> None:
        """Close every worker but the abandoned (hung) ones, which are left to the process's exit."""
        live = [r for r in range(len(self.group)) if r not in self.abandoned]
        if self.abandoned:
            print(f"{self.section} workers {sorted(self.abandoned)} hung and are not closed; a hung local thread "
                  "is left behind until the process exits (cluster.backend=ray runs env workers in processes that "
                  "are killed instead)", file=sys.stderr, flush=True)
        handles = self.group.call("close")
        backend.wait([handles[r] for r in live])

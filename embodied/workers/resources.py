"""Whether a run's worker groups fit what the backend has, checked before any worker is created.

``check_resources`` compares the groups' reservations (``cluster.*_resources`` x their worker counts)
with the backend's CPUs and GPUs, then ``check_memory`` the memory the envs need (from the
``EnvFootprint`` a heavy simulator class declares) with the memory available. Each failure is a
``ConfigError`` naming the field, both figures and a fix.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from embodied.backends import Backend
from embodied.config import Config, ConfigError, EnvConfig
from embodied.config.schema import Resources
from embodied.core.registry import ENVS
from embodied.core.types import footprint_of


def check_resources(cfg: Config, backend: Backend, training: bool) -> None:
    """Fail before any worker is created (and anything waits on it) when the groups' reservations,
    ``cluster.*_resources`` x their worker counts, exceed what the backend has; names the group."""
    c = cfg.cluster
    groups = [("env", c.env_resources, c.num_env_workers * (2 if training else 1)),  # training + eval envs
              ("rollout", c.rollout_resources, c.num_rollout_workers)] + \
        ([("actor", c.actor_resources, cfg.actor.num_ranks)] if training else [])
    have = backend.available()
    for kind, field_name in (("GPU", "num_gpus"), ("CPU", "num_cpus")):
        asked = [(name, getattr(res, field_name), n) for name, res, n in groups]
        total = sum(each * n for _, each, n in asked)
        if total > have[kind] + 1e-9:
            parts = ", ".join(f"{name}: {n} x {each:g}" for name, each, n in asked if each)
            raise ConfigError(f"cluster.{next(name for name, each, _ in asked if each)}_resources.{field_name}: the "
                              f"worker groups reserve {total:g} {kind}s ({parts}) but the {c.backend} backend has "
                              f"{have[kind]:g}" + (f" (the actor group is actor.num_ranks={cfg.actor.num_ranks} ranks)"
                                                   if any(name == "actor" and each for name, each, _ in asked) else ""))
    _check_custom(cfg, groups, have)
    check_memory(cfg, have.get("memory_mib", float("inf")), training)


def _check_custom(cfg: Config, groups: list[tuple[str, Resources, int]], have: dict[str, float]) -> None:
    """Custom resources (``cluster.*_resources.resources``) the groups reserve against what the cluster has."""
    names = sorted({name for _, res, _ in groups for name in res.resources})
    for name in names:
        asked = [(group, res.resources[name], n) for group, res, n in groups if name in res.resources]
        total, has = sum(each * n for _, each, n in asked), have.get(name, 0.0)
        if total > has + 1e-9:
            parts = ", ".join(f"{group}: {n} x {each:g}" for group, each, n in asked)
            raise ConfigError(f"cluster.{asked[0][0]}_resources.resources.{name}: the worker groups reserve {total:g} "
                              f"({parts}) but the {cfg.cluster.backend} backend has {has:g} (start the nodes with "
                              f"`ray start --resources='{{\"{name}\": N}}'`; the local backend has no custom resources)")


class _EnvMemory(NamedTuple):
    """What one env section needs: its envs at ``per_env`` MiB each, ``processes`` env workers at ``per_process``."""

    section: str
    env: EnvConfig
    per_env: float
    per_process: float
    processes: int

    @property
    def mib(self) -> float:
        return self.env.num_envs * self.per_env + self.processes * self.per_process


def _members(env: EnvConfig, section: str) -> list[EnvConfig]:
    """Each member of ``env`` with the envs it runs: a training mixture splits ``num_envs``; a mixture eval env
    evaluates each member with ``num_envs`` envs of its own, all kept built between evals."""
    ids = env.members()
    counts = env.member_counts() if section == "env" else [env.num_envs] * len(ids)
    return [dataclasses.replace(env.member(i), num_envs=n) for i, n in zip(ids, counts)]


def check_memory(cfg: Config, available_mib: float, training: bool) -> None:
    """Fail when the envs a run builds need more memory than there is: for each env class that declares a
    ``footprint`` (e.g. LIBERO's), its envs x ``rss_mib`` plus the processes that build them x ``process_mib``
    (each env worker on Ray; the driver, which also holds the local backend's workers, once), training and
    eval envs together."""
    sections = ([("env", cfg.env)] if training else []) + [("eval_env", cfg.resolved_eval_env())]
    workers = cfg.cluster.num_env_workers if cfg.cluster.backend == "ray" else 0
    # A mixture's members share their section's env worker processes: counted with its first member.
    needs = [_EnvMemory(section, env_cfg, fp.rss_mib, fp.process_mib, 0 if k else workers)
             for section, mixed in sections for k, env_cfg in enumerate(_members(mixed, section))
             if (fp := footprint_of(ENVS.resolve(env_cfg.id))) is not None]
    if not needs:
        return
    driver_mib = max(n.per_process for n in needs)  # the driver (preflight, local workers) loads the libraries once
    total = driver_mib + sum(n.mib for n in needs)
    if total <= available_mib:
        return
    parts = " + ".join(f"{n.section}.num_envs={n.env.num_envs} x {n.per_env / 1024:.2f} GiB"
                       + (f" + {n.processes} env worker processes x {n.per_process / 1024:.2f} GiB" if n.processes
                          else "") for n in needs)
    per_env = max(n.per_env for n in needs)
    fits = max(0, int((available_mib - total + sum(n.env.num_envs * n.per_env for n in needs)) // per_env))
    raise ConfigError(
        f"{needs[0].section}.num_envs: the envs ({needs[0].env.id}) need about {total / 1024:.1f} GiB ({parts} + "
        f"{driver_mib / 1024:.2f} GiB for this process, from each env's measured footprint) but "
        f"{available_mib / 1024:.1f} GiB is available on this machine. Fix: fewer envs (about {fits} fit, "
        f"training and eval together), fewer eval envs (eval_env.num_envs), or a Ray cluster with more memory "
        f"(cluster.backend=ray cluster.address=HOST:PORT)")

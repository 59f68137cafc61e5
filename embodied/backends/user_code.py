"""The user's own code that a Ray run ships to its workers, beside its copy of embodied (``snapshot.py``).

A config names code of the user's as ``package.module:Attr`` (``env.id``, ``eval_env.id``,
``runner.extra_evals[i].id``, ``policy.type``, ``algorithm.name``), or by a short name registered to such an entry
point in this process. The workers of a Ray started on this machine find such a module only the way the driver's
environment lets them (``PYTHONPATH``, the driver's working directory); a cluster's nodes have only what is
installed there. So a Ray backend also ships the top-level package of each module named (its folder, or a
single ``.py`` file, which Ray takes since 2.38) when it is source here and not an install: Ray uploads it once as
a ``runtime_env`` ``py_modules`` entry, so every worker of the run, on any node, imports the same code. An installed
package (site-packages) must be installed on the nodes, as embodied itself is. What cannot be shipped to a cluster
is refused before any worker starts.
"""

from __future__ import annotations

import importlib.util
import site
import sysconfig
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied.config import ConfigError

if TYPE_CHECKING:
    from embodied.config.schema import Config

OWN = ("embodied",)  # in the run's copy already (embodied.envs and embodied.policies are inside it)


def user_packages(cfg: Config) -> list[Path]:
    """What a run of ``cfg`` ships to its Ray workers (``shipped_paths`` of the modules it names); nothing when the
    run's backend is not Ray."""
    if cfg.cluster.backend != "ray":
        return []
    return shipped_paths(named_modules(cfg), remote=cfg.cluster.address is not None)


def named_modules(cfg: Config) -> list[tuple[str, str]]:
    """(config field, module) for each module of code the config names, short names looked up in the registries."""
    from embodied.core.registry import ENVS, UnknownNameError

    env_ids = [("env.id", cfg.env.members()), ("eval_env.id", cfg.resolved_eval_env().members())]
    env_ids += [(f"runner.extra_evals[{i}].id", cfg.env.member(extra.id).members())
                for i, extra in enumerate(cfg.runner.extra_evals)]
    named = []
    for field, ids in env_ids:
        for env_id in ids:
            try:
                named.append((field, _module_of(ENVS.entry_point(env_id))))
            except UnknownNameError:
                continue  # refused, with the known names, by the config's own checks
    policy, algorithm = type(cfg.policy), type(cfg.algorithm)
    named += [("policy.type", policy.__module__), ("policy.type", _module_of(policy.model_class)),
              ("algorithm.name", algorithm.__module__), ("algorithm.name", _module_of(algorithm.algorithm_class))]
    return [(field, module) for field, module in named if module]


def _module_of(target: Any) -> str:
    """The module of an entry point (``"pkg.mod:Attr"``) or of a registered object."""
    if isinstance(target, str):
        return target.partition(":")[0]
    return getattr(target, "__module__", None) or ""


def shipped_paths(named: Iterable[tuple[str, str]], remote: bool) -> list[Path]:
    """The folder (or single ``.py`` file) of the top-level package of each module of ``named`` ((config field,
    module) pairs) that is source here, each once, in order: what a Ray run ships to its workers. Left out:
    embodied's own, the standard library, site-packages, and modules not found here (the config's checks name
    those). With ``remote`` (``cluster.address`` set), a module that cannot be shipped raises ``ConfigError``
    naming the field, the module and the fix; a Ray on this machine may still find it as the driver does."""
    paths: list[Path] = []
    for field, module in named:
        top = module.partition(".")[0]
        if top in OWN:
            continue
        spec = None if top == "__main__" else _find(top)  # a script's own class: no module a worker could import
        portions = _namespace_portions(spec) if spec is not None else []
        if portions:
            paths += [p for p in portions if p not in paths]
            continue
        if spec is not None and _installed(spec):
            continue
        path = _shippable(spec) if spec is not None else None
        if path is None:
            if remote and (spec is not None or top == "__main__"):
                where = spec.origin if spec is not None else "the script being run"
                raise ConfigError(f"{field}: module {module!r} ({where}) cannot be shipped to the Ray cluster at "
                                  "cluster.address; put it in a package (a folder with an __init__.py) importable "
                                  "here, or pip install it on every node of the cluster")
            continue
        if path not in paths:
            paths.append(path)
    return paths


def _find(name: str) -> ModuleSpec | None:
    """The spec of top-level module ``name`` as the driver would import it (nothing is imported)."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _shippable(spec: ModuleSpec) -> Path | None:
    """What ships a top-level module: its package's folder, or its ``.py`` file; None for anything else (a compiled
    extension, a module inside an archive)."""
    folders = list(spec.submodule_search_locations or [])
    if len(folders) == 1 and Path(folders[0]).is_dir():
        return Path(folders[0]).resolve()
    if not folders and spec.origin and spec.origin.endswith(".py") and Path(spec.origin).is_file():
        return Path(spec.origin).resolve()
    return None


def _namespace_portions(spec: ModuleSpec) -> list[Path]:
    """The folders of a namespace package (no ``__init__.py``; e.g. a ``tests`` folder found both as the working
    directory's and by its absolute path, or beside a same-named folder elsewhere) that are source here, each once:
    Ray unpacks each on the workers' path, where they make the same namespace package again."""
    if spec.origin is not None or not spec.submodule_search_locations:
        return []
    folders = dict.fromkeys(Path(f).resolve() for f in spec.submodule_search_locations if Path(f).is_dir())
    return [f for f in folders if not _installed_path(f)]


def _installed_path(path: Path) -> bool:
    roots = _install_roots()
    return any(part in ("site-packages", "dist-packages") for part in path.parts) or \
        any(path.is_relative_to(root) for root in roots)


def _installed(spec: ModuleSpec) -> bool:
    """Whether a module comes with Python or from an installed distribution (site-packages)."""
    if spec.origin in ("built-in", "frozen"):
        return True
    where = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    roots = _install_roots()
    for place in where:
        path = Path(place).resolve()
        if any(part in ("site-packages", "dist-packages") for part in path.parts) or \
                any(path.is_relative_to(root) for root in roots):
            return True
    return False


def _install_roots() -> list[Path]:
    """The folders of the standard library and of installed distributions."""
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    roots += [*site.getsitepackages(), site.getusersitepackages()]
    return [Path(r).resolve() for r in dict.fromkeys(roots)]

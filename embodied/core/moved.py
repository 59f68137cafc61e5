"""Where embodied's modules moved, and the aliases that keep their old import paths working for a release.

The rule for the public surface (``embodied.api``): a name that moves ships an alias that warns once
(``FutureWarning``, shown by default) naming its new place, and the alias is kept for one release. This module
holds the one table of moves, read by three users:

- the import hook (``install``, called by ``embodied/__init__.py``): ``import embodied.types`` gives the module
  ``embodied.core.types`` under both names, and ``embodied.placement.local`` is ``embodied.backends.local``;
- the packages that took an old module's own name (``embodied.policy`` was ``policy.py``): their PEP 562
  ``__getattr__`` (``old_names``) finds that module's names where they live now;
- ``embodied.core.pickles``, which finds the classes of old snapshots at their new homes, without a warning.

It imports nothing of embodied when it loads (``import embodied`` installs the hook and must stay light): a moved
module is imported when its old name is first used.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

# Modules of embodied before the layer subpackages (a0acb30) -> where they are now. Their old names are free.
MOVED_MODULES = {
    "embodied.types": "embodied.core.types",
    "embodied.registry": "embodied.core.registry",
    "embodied.numerics": "embodied.core.numerics",
    "embodied.process_memory": "embodied.core.process_memory",
    "embodied.atomic": "embodied.core.atomic",
    "embodied.policy_config": "embodied.policy.config",
    "embodied.q_functions": "embodied.policy.q_functions",
    "embodied.trust": "embodied.checkpoint.trust",
    "embodied.logger": "embodied.logging.logger",
    "embodied.plot": "embodied.logging.plot",
    "embodied.video": "embodied.logging.video",
    "embodied.wandb_process": "embodied.logging.wandb_process",
    "embodied.demo_replay": "embodied.replay.demos",
    "embodied.env_factory": "embodied.env_runtime.factory",
    "embodied.env_catalog": "embodied.env_runtime.catalog",
    "embodied.preflight": "embodied.env_runtime.preflight",
    "embodied.eval_plan": "embodied.workers.eval_plan",
    "embodied.runner": "embodied.runs.train",
    "embodied.async_runner": "embodied.runs.async_iterations",
    "embodied.offpolicy_runner": "embodied.runs.offpolicy_iterations",
    "embodied.rollout_producer": "embodied.runs.producer",
    "embodied.resume": "embodied.runs.resume",
    "embodied.sft": "embodied.runs.sft",
    "embodied.collect": "embodied.runs.collect",
    "embodied.stop": "embodied.runs.stop",
    # SAC's tanh-Gaussian head became the algorithm's (issue 68): the shared head and its helpers live there now
    "embodied.policies.squashed": "embodied.algorithms.sac_actor",
}

# Packages that moved whole: their modules keep their names below the new package.
MOVED_PACKAGES = {"embodied.placement": "embodied.backends", "embodied.check_env": "embodied.env_runtime.check_env"}

# Old modules whose name is now a package's: new module -> the old module's public names that live there. The first
# new module is the old one's successor (a pickle's class of another name is looked for there).
BECAME_PACKAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "embodied.policy": {
        "embodied.policy.base": ("Policy", "build_policy", "masked_nll"),
        "embodied.policy.config": ("PolicyConfig", "PolicySpec"),  # the old module re-exported them
        "embodied.core.types": ("LogprobGranularity", "Obs", "PolicyOutput"),
        "embodied.core.registry": ("load_entry_point",),
    },
    "embodied.checkpoint": {
        "embodied.checkpoint.store": (
            "CHECKPOINT_NAME", "FORMAT_VERSION", "MANIFEST_FILE", "PACKAGES", "POLICY_DIR", "REPLAY_DIR",
            "TRAINER_FILE", "CheckpointError", "ResumePoint", "check_env_fits", "check_init_from", "check_policy_spec",
            "checkpoints_in", "find_checkpoint", "is_checkpoint", "load_checkpoint", "load_policy_state",
            "load_resume_point", "non_finite_tensors", "package_version", "prune_checkpoints", "read_manifest",
            "remove_partial", "run_dir_of", "save_checkpoint", "save_policy_checkpoint", "trained_env_ids",
            "verify_files", "write_manifest"),
    },
    "embodied.replay": {
        "embodied.replay.buffer": ("CHUNK_BYTES", "FORMAT", "MANIFEST", "ReplayBuffer", "following_rows",
                                   "read_replay_manifest", "save_replay"),
    },
    "embodied.evaluation": {
        "embodied.evaluation.run": ("PERIODIC_BAR_DELAY_S", "EvalProgress", "PeriodicEval", "evaluate_checkpoint",
                                    "report_errors"),
        "embodied.evaluation.stats": ("Z_95", "EvalReport", "EvalSummary", "episode_metrics", "eval_metrics",
                                      "format_table", "per_task", "slug", "wilson_interval", "write_json"),
    },
}

_warned: set[str] = set()


def new_module(old: str) -> str | None:
    """Where the module once named ``old`` is now (``embodied.placement.local`` -> ``embodied.backends.local``);
    None for a name that did not move, or that a package took (``BECAME_PACKAGES``)."""
    if old in MOVED_MODULES:
        return MOVED_MODULES[old]
    package = _moved_package(old)
    return None if package is None else MOVED_PACKAGES[package] + old[len(package):]


def _moved_package(old: str) -> str | None:
    """The package of ``MOVED_PACKAGES`` that ``old`` is or is under, else None."""
    return next((p for p in MOVED_PACKAGES if old == p or old.startswith(p + ".")), None)


def current_home(module: str, name: str) -> str:
    """The module that holds ``module``'s ``name`` now: ``module`` itself when it did not move."""
    if module in BECAME_PACKAGES:
        homes = BECAME_PACKAGES[module]
        return next((new for new, names in homes.items() if name in names), next(iter(homes)))
    return new_module(module) or module


def warn_moved(old: str, new: str) -> None:
    """A ``FutureWarning`` that ``old`` moved to ``new``, once per process and old path."""
    if old in _warned:
        return
    _warned.add(old)
    # stacklevel 3: the caller of the alias (the import system's own frames are skipped by warnings)
    warnings.warn(f"{old} moved to {new}; the old path works for one more release (the stable imports are in "
                  "embodied.api)", FutureWarning, stacklevel=3)


class _Alias:
    """The loader of an old module name: the module is the one at its new name, imported there once."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new
        self.spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's spec on it: the module keeps its own
        package = _moved_package(self.old)
        if package is not None:  # one warning for a package that moved whole, not one per module of it
            warn_moved(package, MOVED_PACKAGES[package])
        else:
            warn_moved(self.old, self.new)


class MovedModuleFinder:
    """A ``sys.meta_path`` finder that answers only old module names, with the module at the new one. First on the
    path: a module below a moved package (``embodied.placement.local``) would otherwise be found again in the new
    package's folder and run a second time, as another module."""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if not name.startswith("embodied."):
            return None
        new = new_module(name)
        if new is None:
            return None
        return ModuleSpec(name, _Alias(name, new))


def install() -> None:
    """Put the finder of old module names first on ``sys.meta_path``, once."""
    if MovedModuleFinder not in sys.meta_path:
        sys.meta_path.insert(0, MovedModuleFinder)


def old_names(package: str) -> Callable[[str], Any]:
    """The PEP 562 ``__getattr__`` of a package that took an old module's name: ``from embodied.policy import
    Policy`` finds ``Policy`` in ``embodied.policy.base``, warning once. Other names raise ``AttributeError`` (a
    submodule not yet imported is then imported by ``from ... import``)."""
    homes = {name: new for new, names in BECAME_PACKAGES[package].items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        warn_moved(f"{package}.{name}", f"{homes[name]}.{name}")
        return value

    return __getattr__

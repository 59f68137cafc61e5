"""Unpickling the run's own snapshots across the move of embodied's modules into layer subpackages.

Env snapshots in a checkpoint (``envs/<rank>.pkl``) are pickles, which name each object's class by its module. A
checkpoint written before the move (a0acb30) names ``embodied.types`` where the class now lives in
``embodied.core.types``; ``loads`` finds such a class at its new home, so those checkpoints still resume.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

# Modules of embodied before the layer subpackages -> where they are now (only those a pickle can name).
MOVED_MODULES = {
    "embodied.types": "embodied.core.types",
    "embodied.registry": "embodied.core.registry",
    "embodied.numerics": "embodied.core.numerics",
    "embodied.process_memory": "embodied.core.process_memory",
    "embodied.atomic": "embodied.core.atomic",
    "embodied.policy_config": "embodied.policy.config",
    "embodied.q_functions": "embodied.policy.q_functions",
    "embodied.checkpoint": "embodied.checkpoint.store",
    "embodied.trust": "embodied.checkpoint.trust",
    "embodied.logger": "embodied.logging.logger",
    "embodied.video": "embodied.logging.video",
    "embodied.eval_plan": "embodied.workers.eval_plan",
    "embodied.replay": "embodied.replay.buffer",
    "embodied.demo_replay": "embodied.replay.demos",
    "embodied.env_factory": "embodied.env_runtime.factory",
    "embodied.env_catalog": "embodied.env_runtime.catalog",
    "embodied.preflight": "embodied.env_runtime.preflight",
    "embodied.stop": "embodied.runs.stop",
}


# Packages that moved whole: their modules keep their names below the new package.
MOVED_PACKAGES = {"embodied.placement": "embodied.backends", "embodied.check_env": "embodied.env_runtime.check_env"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        package = next((p for p in MOVED_PACKAGES if module == p or module.startswith(p + ".")), None)
        if package is not None:
            module = MOVED_PACKAGES[package] + module[len(package):]
        return super().find_class(MOVED_MODULES.get(module, module), name)


def loads(data: bytes) -> Any:
    """``pickle.loads``, with classes of modules that moved found where they are now."""
    return _Unpickler(io.BytesIO(data)).load()

"""The stable surface of embodied: every name a guide shows users, importable from here.

    from embodied.api import ChunkStepResult, EpisodeStats, ENVS            # a simulator
    from embodied.api import Policy, PolicyConfig, PolicySpec, POLICIES     # a policy
    from embodied.api import OnPolicyConfig, UpdateContext, ALGORITHMS      # an algorithm
    from embodied.api import open_demonstrations, collate                   # a dataset

The rule: a name in ``__all__`` holds still. When one moves inside the engine, its old import path ships an alias
that warns once (a ``FutureWarning`` naming the new place) and is kept for one release; the table of moves is
``embodied.core.moved``. Importing from here is the way to never see such a warning: this module follows every
move. ``tests/embodied/test_api.py`` checks that every import in ``README.md`` and ``docs/`` names a name
declared here.

Names load on first use (PEP 562), so ``from embodied.api import ChunkStepResult`` in a simulator's module costs
no torch, and a torch-free config class (``OnPolicyConfig``, ``PolicyConfig``) stays torch-free. This is the top
layer (``embodied/layers.py``): nothing in the engine imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embodied.algorithms import learning_rate
    from embodied.algorithms.base import (LearnerSpec, OffPolicyLearner, OnPolicyLearner, UpdateContext, build_learner,
                                          expand_mask, flatten)
    from embodied.algorithms.batch import expand_rows, take, to_device
    from embodied.algorithms.transitions import ReplaySample
    from embodied.config.algorithm import OffPolicyConfig, OnPolicyConfig, RolloutReset, TDConfig
    from embodied.config.schema import Config
    from embodied.core.registry import ALGORITHMS, ENV_SETS, ENVS, POLICIES
    from embodied.core.types import (MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, ChunkStepResult,
                                     EnvFootprint, EpisodeStats, EvalEpisode, LogprobGranularity, Obs, PolicyOutput,
                                     Trajectory)
    from embodied.data import DemoBatch, Demonstrations, DemoSample, ReadOptions, collate, open_demonstrations
    from embodied.envs.batched import BatchedEnv
    from embodied.policy.base import Policy
    from embodied.policy.config import PolicyConfig, PolicySpec

# name -> the module that holds it now
_WHERE = {
    # a simulator: what it returns, the observation keys, how it is named
    "ChunkStepResult": "embodied.core.types", "EpisodeStats": "embodied.core.types", "EvalEpisode": "embodied.core.types",
    "EnvFootprint": "embodied.core.types", "Obs": "embodied.core.types", "STATES": "embodied.core.types", "MAIN_IMAGES": "embodied.core.types",
    "WRIST_IMAGES": "embodied.core.types", "TASK_DESCRIPTIONS": "embodied.core.types", "BatchedEnv": "embodied.envs.batched",
    "ENVS": "embodied.core.registry", "ENV_SETS": "embodied.core.registry",
    # a policy
    "Policy": "embodied.policy.base", "PolicyConfig": "embodied.policy.config", "PolicySpec": "embodied.policy.config",
    "PolicyOutput": "embodied.core.types", "LogprobGranularity": "embodied.core.types", "POLICIES": "embodied.core.registry",
    # an algorithm: its config class, its learner's protocol and helpers, the run's config it validates against
    "ALGORITHMS": "embodied.core.registry", "Config": "embodied.config.schema", "OnPolicyConfig": "embodied.config.algorithm",
    "OffPolicyConfig": "embodied.config.algorithm", "TDConfig": "embodied.config.algorithm", "OnPolicyLearner": "embodied.algorithms.base",
    "OffPolicyLearner": "embodied.algorithms.base", "UpdateContext": "embodied.algorithms.base", "RolloutReset": "embodied.config.algorithm",
    "expand_mask": "embodied.algorithms.base", "flatten": "embodied.algorithms.base", "expand_rows": "embodied.algorithms.batch",
    "take": "embodied.algorithms.batch", "to_device": "embodied.algorithms.batch", "learning_rate": "embodied.algorithms",
    "Trajectory": "embodied.core.types", "ReplaySample": "embodied.algorithms.transitions", "LearnerSpec": "embodied.algorithms.base", "build_learner": "embodied.algorithms.base",
    # a dataset of demonstrations
    "open_demonstrations": "embodied.data", "ReadOptions": "embodied.data", "Demonstrations": "embodied.data", "DemoSample": "embodied.data",
    "DemoBatch": "embodied.data", "collate": "embodied.data",
}
__all__ = sorted(_WHERE)

def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return __all__

"""The layers of embodied, lowest first: declared here once.

Each entry is a layer's name and the components in it: the simulators (``envs``), the policies (``policies``) and
the subpackages of ``embodied``. A module may import its own layer and those below, never one above, and no
imports go in a circle; ``tests/embodied/test_layers.py`` reads this list and enforces both, and
``docs/architecture.md`` ("Layers") draws the same picture.
"""

from __future__ import annotations

LAYERS: list[tuple[str, list[str]]] = [
    ("foundation: types, registries, atomic files, numerics, memory", ["embodied", "embodied.layers", "embodied.core"]),
    ("contracts: the policy interface, configs", ["embodied.policy", "embodied.config"]),
    ("components: simulators, policies, datasets, algorithms, transport, backends, checkpoints, logging, replay",
     ["envs", "policies", "embodied.data", "embodied.algorithms", "embodied.channels", "embodied.backends",
      "embodied.checkpoint", "embodied.logging", "embodied.replay"]),
    ("env runtime: building, listing and checking envs", ["embodied.env_runtime"]),
    ("workers: env, rollout, actor and eval workers", ["embodied.workers"]),
    ("evaluation: what an eval measures, and the eval runs", ["embodied.evaluation"]),
    ("runs: training, resume, SFT, collection, benchmarks", ["embodied.runs", "embodied.bench"]),
    ("entry point", ["embodied.cli"]),
    ("public API: what users import", ["embodied.api"]),
]

"""The env class of each ManiSkill id, made on first use: what the entry points in ``pyproject.toml`` name
(``embodied.envs.adapters.maniskill.classes:ManiSkill_PickCube_v1``), a ``ManiSkillEnv`` subclass whose ``task`` is
its row of ``tasks.TASKS``. Apart from the table so that the table imports nothing of the env."""

from __future__ import annotations

import functools
from typing import Any

from embodied.envs.adapters.maniskill.env import ManiSkillEnv
from embodied.envs.adapters.maniskill.expert import expert_class
from embodied.envs.adapters.maniskill.tasks import BY_CLASS


@functools.cache
def _task_class(name: str) -> type:
    task = BY_CLASS[name]
    doc = f"ManiSkill3's {task.maniskill_id}: {task.description} (CPU PhysX, one env; a GPU batch on CUDA)."
    attrs: dict[str, Any] = {"task": task, "__doc__": doc, "__module__": __name__}
    expert = expert_class(task.maniskill_id)
    if expert is not None:  # ManiSkill ships a motion-planning solution: embodied collect can use it
        attrs["scripted_expert"] = expert
    return type(name, (ManiSkillEnv,), attrs)


def __getattr__(name: str) -> Any:
    """The env class of a ManiSkill id (the entry points name them), made on first use."""
    if name not in BY_CLASS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _task_class(name)

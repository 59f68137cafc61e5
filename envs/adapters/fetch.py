"""gymnasium-robotics' Fetch tasks (Reach, Push, Slide, PickAndPlace) behind the chunk-step contract.

Needs ``pip install embodied[robotics]``. The Fetch envs are goal-conditioned: their dict
observation becomes ``states = [observation (10 or 25), achieved_goal (3), desired_goal (3)]``
(``FetchEnv.state_slices`` says where each part sits), ``info["is_success"]`` becomes
``info["success"]``, and episodes end only by truncation after ``max_episode_steps`` (50 in the
suite). Actions: float32 [4] in [-1, 1], gripper displacement dx, dy, dz and finger command.

``env.id: FetchPush-v4`` (or FetchReach-v4, FetchSlide-v4, FetchPickAndPlace-v4) picks a task;
``env.kwargs: {reward_type: dense}`` gives the suite's dense reward (its ``...Dense-v4`` ids).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from embodied.envs.adapters.gymnasium_env import GymnasiumEnv

TASK_DESCRIPTIONS: dict[str, str] = {
    "Reach": "move the gripper to the target",
    "Push": "push the block to the target",
    "Slide": "slide the puck to the target",
    "PickAndPlace": "pick up the block and place it at the target",
}


def import_robotics() -> Any:
    """Import gymnasium_robotics and register its envs with gymnasium, or say which extra to install."""
    try:
        import gymnasium_robotics
    except ImportError as err:
        raise ImportError(f"the Fetch envs need gymnasium-robotics: pip install 'embodied[robotics]' ({err})") from err
    import gymnasium as gym

    gym.register_envs(gymnasium_robotics)
    return gymnasium_robotics


class FetchEnv(GymnasiumEnv):
    """A Fetch task of gymnasium-robotics, by its gymnasium id (``FetchReach-v4``, ``FetchPushDense-v4``...)."""

    def __init__(
        self,
        id: str = "FetchReach-v4",  # noqa: A002
        obs_mode: str = "state",
        max_episode_steps: int | None = 50,
        render_mode: str | None = None,
        image_size: int = 64,
        task_description: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        import_robotics()
        match = re.fullmatch(r"Fetch(Reach|Push|Slide|PickAndPlace)(Dense)?-v\d+", id)
        if match is None:
            raise ValueError(f"{id!r} is not a Fetch task id (Fetch{{{','.join(TASK_DESCRIPTIONS)}}}[Dense]-vN)")
        if task_description is None:
            task_description = TASK_DESCRIPTIONS[match.group(1)]
        super().__init__(id, obs_mode=obs_mode, max_episode_steps=max_episode_steps, render_mode=render_mode,
                         image_size=image_size, task_description=task_description, **make_kwargs)


# The entry points of pyproject.toml (``embodied.envs``): one per task, bound to its id.
FetchReach = functools.partial(FetchEnv, "FetchReach-v4")
FetchPush = functools.partial(FetchEnv, "FetchPush-v4")
FetchSlide = functools.partial(FetchEnv, "FetchSlide-v4")
FetchPickAndPlace = functools.partial(FetchEnv, "FetchPickAndPlace-v4")

"""Meta-World v3 tasks (``reach-v3``, ``pick-place-v3``...) behind the chunk-step contract.

Needs ``pip install embodied[metaworld]``. Each env is Meta-World's MT1 benchmark for one task,
made with ``gymnasium.make("Meta-World/MT1", env_name=task, ...)``: every reset draws one of the
task's goal variations (50, fixed by ``task_seed``). ``states`` is Meta-World's float [39]
observation (hand, gripper, objects, previous frame, goal); ``info["success"]`` is Meta-World's
own; ``terminate_on_success`` ends an episode on success (off by default, as in Meta-World's
training setup), otherwise episodes are truncated after ``max_episode_steps`` (at most 500,
Meta-World's ``max_path_length``). Actions: float32 [4] in [-1, 1], hand dx, dy, dz and gripper.

Configs: ``env.id: MetaWorld-v3`` with ``env.kwargs: {task: pick-place-v3}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.envs.adapters.gymnasium_env import GymnasiumEnv

MAX_PATH_LENGTH = 500  # Meta-World refuses to step an episode further
# Meta-World's corner cameras are mounted upside down: their frames are turned by 180 degrees.
ROTATED_CAMERAS: frozenset[str] = frozenset({"corner", "corner2", "corner3"})


def import_metaworld() -> Any:
    """Import metaworld (which registers ``Meta-World/...`` with gymnasium), or say which extra to install."""
    try:
        import metaworld
    except ImportError as err:
        raise ImportError(f"the Meta-World envs need metaworld: pip install 'embodied[metaworld]' ({err})") from err
    return metaworld


def task_names() -> list[str]:
    """The v3 task names of the installed Meta-World (``assembly-v3`` ... ``window-close-v3``)."""
    return list(import_metaworld().MT1.ENV_NAMES)


def describe(task: str) -> str:
    """A task description from the task name: ``pick-place-v3`` -> ``pick place``."""
    return task.rsplit("-v", 1)[0].replace("-", " ")


class MetaWorldEnv(GymnasiumEnv):
    """One Meta-World v3 task (MT1) with ``states`` / ``main_images`` observations."""

    def __init__(
        self,
        task: str = "reach-v3",
        obs_mode: str = "state",
        max_episode_steps: int = MAX_PATH_LENGTH,
        render_mode: str | None = None,
        image_size: int = 64,
        camera_name: str = "corner",
        terminate_on_success: bool = False,
        task_seed: int | None = 0,
        task_description: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        names = task_names()
        if task not in names:
            raise ValueError(f"unknown Meta-World task {task!r}; the installed metaworld has {', '.join(names)}")
        if isinstance(max_episode_steps, (int, np.integer)) and max_episode_steps > MAX_PATH_LENGTH:
            raise ValueError(f"max_episode_steps: Meta-World episodes last at most {MAX_PATH_LENGTH} steps, "
                             f"got {max_episode_steps}")
        self.task = task
        self.camera_name = camera_name
        super().__init__(
            "Meta-World/MT1", obs_mode=obs_mode, max_episode_steps=max_episode_steps, render_mode=render_mode,
            image_size=image_size, task_description=describe(task) if task_description is None else task_description,
            env_name=task, seed=task_seed, camera_name=camera_name, terminate_on_success=terminate_on_success,
            disable_env_checker=True,  # Meta-World's observations overstep its own space's bounds
            **make_kwargs,
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict[str, Any]]:
        # Meta-World ignores reset's seed; its own seed() feeds the goal choice of the next reset.
        if seed is not None:
            self.env.unwrapped.seed(seed)
        return super().reset(seed=seed, options=options)

    def _postprocess_frame(self, frame: np.ndarray) -> np.ndarray:
        return frame[::-1, ::-1] if self.camera_name in ROTATED_CAMERAS else frame

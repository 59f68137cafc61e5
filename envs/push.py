"""Push: push a cube over the table into a goal region."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from embodied.envs import mujoco_batched as vec
from embodied.envs.cube_tasks import SingleCubeBatchedEnv, SingleCubeTask
from embodied.envs.mujoco_base import TableTopEnv, closeness, distance, staged_reward


class PushEnv(SingleCubeTask):
    """Push the red cube until its centre lies inside the green goal disk on the table.

    ``states`` (float32 [20]): TCP position (3), finger opening in metres (1), cube position (3),
    cube orientation quaternion w, x, y, z (4), goal position (3: the disk's centre at cube-centre
    height), cube - TCP (3), goal - cube (3); metres, table top at z = 0.
    Success: the cube rests on the table (centre below one half-size + 1 cm) with its centre less
    than ``success_threshold`` from the goal centre in x-y (the drawn disk has that radius).
    Dense reward: :func:`staged_reward` of the progress ``(reach + 2 push) / 3``, with reach the
    closeness of the TCP to the cube and push that of the cube to the goal.
    """

    XML_FILE: ClassVar[str] = "push.xml"
    # A moved cube keeps room behind it for a push toward any goal: the closed fingers touch it 0.037 m from its
    # centre and come down a little further back, so a start nearer the workspace's edge cannot be pushed inwards.
    cube_margin: ClassVar[float] = 0.06

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 100,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        success_threshold: float = 0.04,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
    ) -> None:
        super().__init__(
            obs_mode=obs_mode,
            max_episode_steps=max_episode_steps,
            image_size=image_size,
            render_mode=render_mode,
            reward_type=reward_type,
            terminate_on_success=terminate_on_success,
            success_threshold=success_threshold,
            layout_shift_x=layout_shift_x,
            layout_shift_y=layout_shift_y,
            layout_swap=layout_swap,
        )

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        return "push the red cube into the green goal region"

    @property
    def goal_pos(self) -> np.ndarray:
        """Where the cube's centre should go: the goal centre at cube height, float64 [3] (a copy)."""
        return np.array([*self.data.mocap_pos[self._goal_mocap][:2], self.cube_half])

    def _reset_task(self) -> None:
        cube_xy, goal_xy = self._sample_cube_and_goal_xy()
        self._place_on_table(self._cube_joint, cube_xy, self.cube_half)
        self.data.mocap_pos[self._goal_mocap] = (*goal_xy, 0.0005)

    def _reward_success(self) -> tuple[float, bool]:
        reward, success = push_reward(self, self.data.site_xpos[self._tcp], self.data.xpos[self._cube_body],
                                      self.data.mocap_pos[self._goal_mocap][:2])
        return float(reward), bool(success)


def push_reward(task: PushEnv, tcp: np.ndarray, cube: np.ndarray, goal_xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Push's staged reward (reach the cube, push it to the goal) and success (the cube on the table, at the goal in
    the plane), of one env's positions or of many (the batched twin's)."""
    goal_distance = distance(cube[..., :2], goal_xy)
    success = (cube[..., 2] < task.cube_half + 0.01) & (goal_distance < task.success_threshold)
    reach = closeness(distance(cube, tcp), 0.2)
    push = closeness(goal_distance, 0.2)
    return staged_reward((reach + 2.0 * push) / 3.0, success), success


class PushBatchedEnv(SingleCubeBatchedEnv):
    """:class:`PushEnv` for ``state`` observations, N envs stepped natively a chunk at a time."""

    TASK: ClassVar[type[TableTopEnv]] = PushEnv

    def _goal(self, mocap: np.ndarray) -> np.ndarray:
        xy = mocap[..., self.proto._goal_mocap, :2]
        return np.concatenate([xy, np.full(xy.shape[:-1] + (1,), self.proto.cube_half)], axis=-1)

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        tcp, _ = vec.robot_state(self.proto, qpos)
        return push_reward(self.proto, tcp, self._cube(qpos), mocap[..., self.proto._goal_mocap, :2])


PushEnv._batched_twin = PushBatchedEnv

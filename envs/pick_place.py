"""PickPlace: grasp a cube and bring it to a target on or above the table."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from embodied.envs import mujoco_batched as vec
from embodied.envs.cube_tasks import SingleCubeBatchedEnv, SingleCubeTask
from embodied.envs.mujoco_base import TableTopEnv, closeness, distance, staged_reward


class PickPlaceEnv(SingleCubeTask):
    """Grasp the red cube and move its centre into the green target sphere.

    ``states`` (float32 [20]): TCP position (3), finger opening in metres (1), cube position (3),
    cube orientation quaternion w, x, y, z (4), target position (3), cube - TCP (3),
    target - cube (3); metres, table top at z = 0. With probability ``table_goal_prob`` the
    target lies on the table (cube-centre height), otherwise up to 0.2 m above it.
    Success: the cube's centre is less than ``success_threshold`` from the target (the drawn
    sphere has that radius). Dense reward: :func:`staged_reward` of ``(reach + grasp + 2 place) / 4``:
    closeness of the TCP to the cube, both fingers touching it, closeness of the cube to the target.
    """

    XML_FILE: ClassVar[str] = "pick_place.xml"
    GOAL_GEOMS: ClassVar[tuple[str, ...]] = ("goal", "goal_shadow")
    goal_max_height: ClassVar[float] = 0.2  # metres of the target's centre above the table

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 100,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        success_threshold: float = 0.03,
        table_goal_prob: float = 0.3,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
    ) -> None:
        if not 0.0 <= table_goal_prob <= 1.0:
            raise ValueError(f"table_goal_prob must be in [0, 1], got {table_goal_prob!r}")
        self.table_goal_prob = float(table_goal_prob)
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
        self._shadow_mocap = int(self.model.body_mocapid[self.model.body("goal_shadow").id])

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        return "pick up the red cube and place it at the green target"

    @property
    def goal_pos(self) -> np.ndarray:
        """World position of the target, float64 [3] (a copy)."""
        return self.data.mocap_pos[self._goal_mocap].copy()

    @property
    def is_grasped(self) -> bool:
        """Whether both fingers touch the cube."""
        return self._is_grasped(self._cube_geom)

    def _reset_task(self) -> None:
        cube_xy, goal_xy = self._sample_cube_and_goal_xy()
        on_table = self.np_random.random() < self.table_goal_prob
        # In the air: high enough that a cube resting on the table is clearly outside the target.
        goal_z = self.cube_half if on_table else self.np_random.uniform(self.cube_half + 0.05, self.goal_max_height)
        self._place_on_table(self._cube_joint, cube_xy, self.cube_half)
        self.data.mocap_pos[self._goal_mocap] = (*goal_xy, goal_z)
        self.data.mocap_pos[self._shadow_mocap] = (*goal_xy, 0.0005)

    def _reward_success(self) -> tuple[float, bool]:
        reward, success = pick_place_reward(self, self.data.site_xpos[self._tcp], self.data.xpos[self._cube_body],
                                            self.data.mocap_pos[self._goal_mocap],
                                            np.array(self._finger_contacts(self._cube_geom)))
        return float(reward), bool(success)


def pick_place_reward(task: PickPlaceEnv, tcp: np.ndarray, cube: np.ndarray, goal: np.ndarray,
                      contacts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PickPlace's staged reward (reach the cube, grasp it: both fingers touching, ``contacts`` [..., 2], place it
    at the goal) and success (the cube at the goal), of one env or of many (the batched twin's)."""
    goal_distance = distance(cube, goal)
    success = goal_distance < task.success_threshold
    reach = closeness(distance(cube, tcp), 0.2)
    grasp = (contacts[..., 0] & contacts[..., 1]).astype(np.float64)
    place = closeness(goal_distance, 0.2)
    return staged_reward((reach + grasp + 2.0 * place) / 4.0, success), success


class PickPlaceBatchedEnv(SingleCubeBatchedEnv):
    """:class:`PickPlaceEnv` for ``state`` observations, N envs stepped natively a chunk at a time."""

    TASK: ClassVar[type[TableTopEnv]] = PickPlaceEnv
    CONTACTS: ClassVar[bool] = True  # the grasp term

    def _goal(self, mocap: np.ndarray) -> np.ndarray:
        return mocap[..., self.proto._goal_mocap, :]

    def _contact_geoms(self) -> np.ndarray:
        return np.full(self.num_envs, self.proto._cube_geom)

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        tcp, _ = vec.robot_state(self.proto, qpos)
        return pick_place_reward(self.proto, tcp, self._cube(qpos), self._goal(mocap), contacts)


PickPlaceEnv._batched_twin = PickPlaceBatchedEnv

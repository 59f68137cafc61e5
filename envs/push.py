"""Push: push a cube over the table into a goal region."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from envs.mujoco_base import TableTopEnv, check_positive, closeness, staged_reward


class PushEnv(TableTopEnv):
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
    STATE_DIM: ClassVar[int] = 20
    cube_low: ClassVar[np.ndarray] = np.array([-0.12, -0.12])
    cube_high: ClassVar[np.ndarray] = np.array([0.12, 0.12])
    # Inside the workspace by more than a push's run-up, so a cube pushed past it can be fetched back.
    goal_low: ClassVar[np.ndarray] = np.array([-0.15, -0.15])
    goal_high: ClassVar[np.ndarray] = np.array([0.15, 0.15])
    min_goal_distance: ClassVar[float] = 0.1  # metres between the cube's start and the goal

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 100,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        success_threshold: float = 0.04,
    ) -> None:
        check_positive("success_threshold", success_threshold)
        self.success_threshold = float(success_threshold)
        super().__init__(
            obs_mode=obs_mode,
            max_episode_steps=max_episode_steps,
            image_size=image_size,
            render_mode=render_mode,
            reward_type=reward_type,
            terminate_on_success=terminate_on_success,
        )
        m = self.model
        self._cube_joint = m.joint("cube_joint").id
        self._cube_body = m.body("cube").id
        self._cube_geom = m.geom("cube").id
        self.cube_half = float(m.geom_size[self._cube_geom][2])
        self._goal_mocap = int(m.body_mocapid[m.body("goal").id])
        m.geom_size[m.geom("goal").id][0] = self.success_threshold  # draw the region that counts

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        return "push the red cube into the green goal region"

    @property
    def cube_pos(self) -> np.ndarray:
        """World position of the cube's centre, float64 [3] (a copy)."""
        return self.data.xpos[self._cube_body].copy()

    @property
    def goal_pos(self) -> np.ndarray:
        """Where the cube's centre should go: the goal centre at cube height, float64 [3] (a copy)."""
        return np.array([*self.data.mocap_pos[self._goal_mocap][:2], self.cube_half])

    def _reset_task(self) -> None:
        cube_xy = self.np_random.uniform(self.cube_low, self.cube_high)
        goal_xy = self._sample_apart(1, self.goal_low, self.goal_high, self.min_goal_distance, (cube_xy,))[0]
        yaw = self.np_random.uniform(-np.pi / 4, np.pi / 4)
        self._place_free_body(self._cube_joint, np.array([*cube_xy, self.cube_half]), yaw)
        self.data.mocap_pos[self._goal_mocap] = (*goal_xy, 0.0005)

    def _task_state(self) -> np.ndarray:
        tcp, cube, goal = self.data.site_xpos[self._tcp], self.data.xpos[self._cube_body], self.goal_pos
        quat = self.data.xquat[self._cube_body]
        return np.concatenate([tcp, [self.finger_opening], cube, quat, goal, cube - tcp, goal - cube])

    def _goal_distance(self) -> float:
        return float(np.linalg.norm(self.data.xpos[self._cube_body][:2] - self.data.mocap_pos[self._goal_mocap][:2]))

    def _dense_reward(self) -> float:
        reach = closeness(float(np.linalg.norm(self.data.xpos[self._cube_body] - self.data.site_xpos[self._tcp])), 0.2)
        push = closeness(self._goal_distance(), 0.2)
        return staged_reward((reach + 2.0 * push) / 3.0, self._is_success())

    def _is_success(self) -> bool:
        on_table = self.data.xpos[self._cube_body][2] < self.cube_half + 0.01
        return bool(on_table and self._goal_distance() < self.success_threshold)

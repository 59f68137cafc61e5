"""What Push and PickPlace share: one free cube to bring into a goal region drawn at its true size."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from embodied.envs.layout import Region, swapped
from embodied.envs.mujoco_base import TableTopEnv, check_positive
from embodied.envs.mujoco_batched import TableTopBatchedEnv, free_pos, free_quat, robot_state


class SingleCubeTask(TableTopEnv):
    """Base of the tasks that move one cube into a goal region of radius ``success_threshold``.

    The MJCF file names the cube's body and geom ``cube``, its free joint ``cube_joint`` and the
    goal's mocap body ``goal``; the first size of every geom in ``GOAL_GEOMS`` is set to
    ``success_threshold``, so the drawn region is the one that counts.
    ``states`` (float32 [20]): TCP position (3), finger opening in metres (1), cube position (3),
    cube orientation quaternion w, x, y, z (4), :attr:`goal_pos` (3), cube - TCP (3),
    goal - cube (3); metres, table top at z = 0.
    A subclass defines :attr:`goal_pos`, ``_reset_task`` (drawing the start and the goal with
    :meth:`_sample_cube_and_goal_xy`), ``_dense_reward`` and ``_is_success``.
    ``layout_shift_x/y`` move the cube's and the goal's regions (one offset each); ``layout_swap`` exchanges
    the cube's start and the goal's x-y.
    """

    STATE_DIM: ClassVar[int] = 20
    GOAL_GEOMS: ClassVar[tuple[str, ...]] = ("goal",)  # geoms drawn at the success radius
    cube_low: ClassVar[np.ndarray] = np.array([-0.12, -0.12])
    cube_high: ClassVar[np.ndarray] = np.array([0.12, 0.12])
    # Inside the workspace by more than a push's run-up, so a cube pushed past it can be fetched back.
    goal_low: ClassVar[np.ndarray] = np.array([-0.15, -0.15])
    goal_high: ClassVar[np.ndarray] = np.array([0.15, 0.15])
    min_goal_distance: ClassVar[float] = 0.1  # metres (x-y) between the cube's start and the goal
    # How far inside the workspace (x-y) the cube's start must stay when the layout moves it (envs/layout.py).
    cube_margin: ClassVar[float] = 0.0
    LAYOUT_SWAP: ClassVar[str | None] = "the cube's start and the goal"

    def __init__(
        self,
        obs_mode: str,
        max_episode_steps: int,
        image_size: int,
        render_mode: str | None,
        reward_type: str,
        terminate_on_success: bool,
        success_threshold: float,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
    ) -> None:
        """Check ``success_threshold``, build the env (see :class:`TableTopEnv`), bind cube and goal."""
        check_positive("success_threshold", success_threshold)
        self.success_threshold = float(success_threshold)
        super().__init__(
            obs_mode=obs_mode,
            max_episode_steps=max_episode_steps,
            image_size=image_size,
            render_mode=render_mode,
            reward_type=reward_type,
            terminate_on_success=terminate_on_success,
            layout_shift_x=layout_shift_x,
            layout_shift_y=layout_shift_y,
            layout_swap=layout_swap,
        )
        m = self.model
        self._cube_joint = m.joint("cube_joint").id
        self._cube_body = m.body("cube").id
        self._cube_geom = m.geom("cube").id
        self.cube_half = float(m.geom_size[self._cube_geom][2])
        self._goal_mocap = int(m.body_mocapid[m.body("goal").id])
        for name in self.GOAL_GEOMS:
            m.geom_size[m.geom(name).id][0] = self.success_threshold  # draw the region that counts

    @property
    def cube_pos(self) -> np.ndarray:
        """World position of the cube's centre, float64 [3] (a copy)."""
        return self.data.xpos[self._cube_body].copy()

    @property
    def goal_pos(self) -> np.ndarray:
        """Where the cube's centre should go, float64 [3] (a copy)."""
        raise NotImplementedError

    def _sample_cube_and_goal_xy(self) -> tuple[np.ndarray, np.ndarray]:
        """Draw the cube's start x-y, then the goal's x-y (in that order from ``self.np_random``).

        The start is uniform in ``cube_low .. cube_high``; the goal uniform in
        ``goal_low .. goal_high`` and at least ``min_goal_distance`` from the start (each region moved by
        its own layout offset); then, with probability ``layout_swap``, the two exchange places.
        """
        cube_xy = self.layout.place(self.np_random, self.cube_low, self.cube_high)
        goal_xy = self._sample_apart(1, self.goal_low, self.goal_high, self.min_goal_distance, (cube_xy,))[0]
        cube_xy, goal_xy = swapped(np.array([cube_xy, goal_xy]), self._swap_pair(2))
        return cube_xy, goal_xy

    def _layout_regions(self) -> dict[str, Region]:
        return {"cube": Region(self.cube_low, self.cube_high, self.cube_margin),
                "goal": Region(self.goal_low, self.goal_high)}

    def _task_state(self) -> np.ndarray:
        tcp, cube, goal = self.data.site_xpos[self._tcp], self.data.xpos[self._cube_body], self.goal_pos
        quat = self.data.xquat[self._cube_body]
        return np.concatenate([tcp, [self.finger_opening], cube, quat, goal, cube - tcp, goal - cube])


class SingleCubeBatchedEnv(TableTopBatchedEnv):
    """What the batched twins of Push and PickPlace share: the cube and the ``states`` layout."""

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        self._cube_adr = int(self.proto.model.jnt_qposadr[self.proto._cube_joint])

    def _goal(self, mocap: np.ndarray) -> np.ndarray:
        """:attr:`SingleCubeTask.goal_pos` [..., 3] of mocap positions [..., nmocap, 3]."""
        raise NotImplementedError

    def _cube(self, qpos: np.ndarray) -> np.ndarray:
        return free_pos(qpos, self._cube_adr)

    def _observe(self, qpos: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        tcp, opening = robot_state(self.proto, qpos)
        cube, goal = self._cube(qpos), self._goal(mocap)
        return np.concatenate([tcp, opening, cube, free_quat(qpos, self._cube_adr), goal, cube - tcp, goal - cube],
                              axis=-1)

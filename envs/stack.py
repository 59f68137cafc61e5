"""Stack: put one cube on top of another and let go."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from embodied.envs import mujoco_batched as vec
from embodied.envs.layout import Region, swapped
from embodied.envs.mujoco_base import TableTopEnv, check_positive, closeness, distance, staged_reward


class StackEnv(TableTopEnv):
    """Grasp the red cube, set it on the green cube and release it.

    ``states`` (float32 [24]): TCP position (3), finger opening in metres (1), red cube position
    (3) and quaternion w, x, y, z (4), green cube position (3) and quaternion (4), red - TCP (3),
    stacking spot (green + one cube height up) - red (3); metres, table top at z = 0.
    Success: the red cube rests on the green one (centres within ``xy_tolerance`` in x-y and one
    cube height +- 5 mm apart in z) and neither finger touches it.
    Dense reward: :func:`staged_reward` of ``(reach + grasp + 2 place) / 4``: closeness of the TCP
    to the red cube, both fingers touching it, closeness of the red cube to the stacking spot.
    ``layout_shift_x/y`` move each cube's region by its own offset; ``layout_swap`` exchanges the cubes' places.
    """

    XML_FILE: ClassVar[str] = "stack.xml"
    STATE_DIM: ClassVar[int] = 24
    cube_low: ClassVar[np.ndarray] = np.array([-0.12, -0.12])
    cube_high: ClassVar[np.ndarray] = np.array([0.12, 0.12])
    min_cube_distance: ClassVar[float] = 0.1  # metres between the cubes' starts
    z_tolerance: ClassVar[float] = 0.005
    LAYOUT_SWAP: ClassVar[str | None] = "the two cubes"

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 150,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        xy_tolerance: float = 0.02,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
    ) -> None:
        check_positive("xy_tolerance", xy_tolerance)
        self.xy_tolerance = float(xy_tolerance)
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
        self._top_joint, self._base_joint = m.joint("cube_top_joint").id, m.joint("cube_base_joint").id
        self._top_body, self._base_body = m.body("cube_top").id, m.body("cube_base").id
        self._top_geom = m.geom("cube_top").id
        self.cube_half = float(m.geom_size[self._top_geom][2])
        # A tolerance as large as the cube itself would count a cube resting beside the other.
        if not self.xy_tolerance < self.cube_half:
            raise ValueError(f"xy_tolerance must be in (0, {self.cube_half}), got {xy_tolerance!r}")

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        return "stack the red cube on the green cube"

    @property
    def top_pos(self) -> np.ndarray:
        """World position of the red cube (the one to move), float64 [3] (a copy)."""
        return self.data.xpos[self._top_body].copy()

    @property
    def base_pos(self) -> np.ndarray:
        """World position of the green cube (the one to stack on), float64 [3] (a copy)."""
        return self.data.xpos[self._base_body].copy()

    @property
    def stack_pos(self) -> np.ndarray:
        """Where the red cube's centre goes: one cube height above the green one's, float64 [3]."""
        return self.data.xpos[self._base_body] + (0.0, 0.0, 2 * self.cube_half)

    @property
    def is_grasped(self) -> bool:
        """Whether both fingers touch the red cube."""
        return self._is_grasped(self._top_geom)

    def _reset_task(self) -> None:
        xys = self._sample_apart(2, self.cube_low, self.cube_high, self.min_cube_distance)
        top_xy, base_xy = swapped(xys, self._swap_pair(2))
        for joint, xy in ((self._top_joint, top_xy), (self._base_joint, base_xy)):
            self._place_on_table(joint, xy, self.cube_half)

    def _layout_regions(self) -> dict[str, Region]:
        return {"cube": Region(self.cube_low, self.cube_high)}

    def _task_state(self) -> np.ndarray:
        tcp, top, base = self.data.site_xpos[self._tcp], self.data.xpos[self._top_body], self.data.xpos[self._base_body]
        quats = (self.data.xquat[self._top_body], self.data.xquat[self._base_body])
        return np.concatenate(
            [tcp, [self.finger_opening], top, quats[0], base, quats[1], top - tcp, self.stack_pos - top]
        )

    def _reward_success(self) -> tuple[float, bool]:
        reward, success = stack_reward(self, self.data.site_xpos[self._tcp], self.data.xpos[self._top_body],
                                       self.stack_pos, np.array(self._finger_contacts(self._top_geom)))
        return float(reward), bool(success)

    @property
    def is_stacked(self) -> bool:
        """Whether the red cube sits on the green one (held or not)."""
        offset = self.data.xpos[self._top_body] - self.stack_pos
        return bool(np.linalg.norm(offset[:2]) < self.xy_tolerance and abs(offset[2]) < self.z_tolerance)



def stack_reward(task: StackEnv, tcp: np.ndarray, top: np.ndarray, spot: np.ndarray,
                 contacts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stack's staged reward (reach the red cube, grasp it: both fingers touching, ``contacts`` [..., 2], place it on
    the stacking spot) and success (stacked, within the tolerances, and let go), of one env or of many."""
    offset = top - spot
    stacked = (np.linalg.norm(offset[..., :2], axis=-1) < task.xy_tolerance) & (np.abs(offset[..., 2]) < task.z_tolerance)
    success = stacked & ~(contacts[..., 0] | contacts[..., 1])
    reach = closeness(distance(top, tcp), 0.2)
    grasp = (contacts[..., 0] & contacts[..., 1]).astype(np.float64)
    place = closeness(distance(spot, top), 0.2)
    return staged_reward((reach + grasp + 2.0 * place) / 4.0, success), success


class StackBatchedEnv(vec.TableTopBatchedEnv):
    """:class:`StackEnv` for ``state`` observations, N envs stepped natively a chunk at a time."""

    TASK: ClassVar[type[TableTopEnv]] = StackEnv
    CONTACTS: ClassVar[bool] = True  # the grasp term, and success needs the fingers off the red cube

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        super().__init__(num_envs, **kwargs)
        m = self.proto.model
        self._top_adr = int(m.jnt_qposadr[self.proto._top_joint])
        self._base_adr = int(m.jnt_qposadr[self.proto._base_joint])

    def _cubes(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Red cube, green cube and stacking spot positions [..., 3]."""
        top, base = vec.free_pos(qpos, self._top_adr), vec.free_pos(qpos, self._base_adr)
        return top, base, base + np.array([0.0, 0.0, 2 * self.proto.cube_half])

    def _contact_geoms(self) -> np.ndarray:
        return np.full(self.num_envs, self.proto._top_geom)

    def _observe(self, qpos: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        tcp, opening = vec.robot_state(self.proto, qpos)
        top, base, spot = self._cubes(qpos)
        return np.concatenate([tcp, opening, top, vec.free_quat(qpos, self._top_adr), base,
                               vec.free_quat(qpos, self._base_adr), top - tcp, spot - top], axis=-1)

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        tcp, _ = vec.robot_state(self.proto, qpos)
        top, _, spot = self._cubes(qpos)
        return stack_reward(self.proto, tcp, top, spot, contacts)


StackEnv._batched_twin = StackBatchedEnv

"""PickColor: lift the cube whose colour the instruction names (language-conditioned)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from embodied.envs import mujoco_batched as vec
from embodied.envs.layout import Region, swapped
from embodied.envs.mujoco_base import TableTopEnv, check_positive, closeness, distance, staged_reward

# Colour names of the instruction and the cubes' RGBA (chosen to stay apart under table light).
COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.1, 1.0),
    "green": (0.1, 0.7, 0.2, 1.0),
    "blue": (0.15, 0.3, 0.9, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
}


class PickColorEnv(TableTopEnv):
    """Four cubes of different colours; lift the one named by ``task_description``.

    Each episode shuffles the colours over the four cube bodies, places the cubes apart and picks
    the target colour at random, so the instruction ("pick up the green cube") is the only place
    the target is named and the image the only place colours are seen.
    ``states`` (float32 [16]): TCP position (3), finger opening in metres (1), the positions of the
    four cubes in body order (4 x 3); metres, table top at z = 0. The state deliberately holds no
    colours and no target identity: a state-only policy cannot tell which cube to lift.
    ``info["target_index"]`` (the target's body index, 0..3) is privileged, for scripted experts
    and tests. ``main_images`` come from the task's ``overhead`` camera, which frames the cube area
    (cubes about 8 pixels wide at 64x64), and the gripper starts near a home pose above the table's
    centre, as robot benchmarks start their arms: which cube to go to is the question the task asks
    of a policy, not where a randomly placed gripper is in 3-D from one camera. Success: the target cube is held by both fingers with its centre at least
    ``lift_height`` above its resting height. Dense reward: :func:`staged_reward` of
    ``(reach + grasp + 2 lift) / 4``: closeness of the TCP to the target, both fingers touching
    it, and the fraction of ``lift_height`` it is lifted while grasped.
    ``layout_shift_x/y`` move each cube's region by its own offset; ``layout_swap`` exchanges the places of
    two cubes drawn at random.
    """

    XML_FILE: ClassVar[str] = "pick_color.xml"
    MAIN_CAMERA: ClassVar[str] = "overhead"
    # Home pose (0, 0, 0.2) with a little noise.
    gripper_init_low: ClassVar[np.ndarray] = np.array([-0.02, -0.02, 0.18])
    gripper_init_high: ClassVar[np.ndarray] = np.array([0.02, 0.02, 0.22])
    NUM_CUBES: ClassVar[int] = 4
    STATE_DIM: ClassVar[int] = 4 + 3 * NUM_CUBES
    cube_low: ClassVar[np.ndarray] = np.array([-0.15, -0.15])
    cube_high: ClassVar[np.ndarray] = np.array([0.15, 0.15])
    # Clears the open fingers of a neighbour's corner when the gripper comes down on a cube.
    min_cube_distance: ClassVar[float] = 0.1
    LAYOUT_SWAP: ClassVar[str | None] = "two of the cubes"

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 100,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        lift_height: float = 0.1,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
    ) -> None:
        check_positive("lift_height", lift_height)
        if lift_height > self.workspace_high[2] - 0.05:
            raise ValueError(f"lift_height must be below {self.workspace_high[2] - 0.05} m, got {lift_height!r}")
        self.lift_height = float(lift_height)
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
        names = [f"cube{i}" for i in range(self.NUM_CUBES)]
        self._joints = [m.joint(f"{n}_joint").id for n in names]
        self._bodies = np.array([m.body(n).id for n in names])
        self._geoms = np.array([m.geom(n).id for n in names])
        self.cube_half = float(m.geom_size[self._geoms[0]][2])
        self._rgba = np.array(list(COLORS.values()), dtype=np.float32)
        self.cube_colors: list[str] = list(COLORS)  # colour of each body, reshuffled per episode
        self._target = 0

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives, e.g. "pick up the green cube"."""
        return f"pick up the {self.cube_colors[self._target]} cube"

    @property
    def target_index(self) -> int:
        """Body index (0..3) of the cube to lift (privileged: not in the observation)."""
        return self._target

    @property
    def cube_positions(self) -> np.ndarray:
        """World positions of the cubes in body order, float64 [4, 3] (a copy)."""
        return self.data.xpos[self._bodies].copy()

    @property
    def target_pos(self) -> np.ndarray:
        """World position of the cube to lift, float64 [3] (a copy)."""
        return self.data.xpos[self._bodies[self._target]].copy()

    @property
    def is_grasped(self) -> bool:
        """Whether both fingers touch the target cube."""
        return self._is_grasped(self._geoms[self._target])

    def _reset_task(self) -> None:
        order = self.np_random.permutation(self.NUM_CUBES)
        self.cube_colors = [list(COLORS)[i] for i in order]
        self.model.geom_rgba[self._geoms] = self._rgba[order]
        self._target = int(self.np_random.integers(self.NUM_CUBES))
        xys = self._sample_apart(self.NUM_CUBES, self.cube_low, self.cube_high, self.min_cube_distance)
        xys = swapped(xys, self._swap_pair(self.NUM_CUBES))
        for joint, xy in zip(self._joints, xys):
            self._place_on_table(joint, xy, self.cube_half)

    def _layout_regions(self) -> dict[str, Region]:
        return {"cube": Region(self.cube_low, self.cube_high)}

    def _task_info(self) -> dict[str, Any]:
        return {"target_index": self._target}

    def _task_state(self) -> np.ndarray:
        tcp = self.data.site_xpos[self._tcp]
        return np.concatenate([tcp, [self.finger_opening], self.data.xpos[self._bodies].ravel()])

    def _reward_success(self) -> tuple[float, bool]:
        reward, success = pick_color_reward(self, self.data.site_xpos[self._tcp],
                                            self.data.xpos[self._bodies[self._target]],
                                            np.array(self._finger_contacts(self._geoms[self._target])))
        return float(reward), bool(success)


def pick_color_reward(task: PickColorEnv, tcp: np.ndarray, target: np.ndarray,
                      contacts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PickColor's staged reward (reach the named cube, grasp it: both fingers touching, ``contacts`` [..., 2], lift
    it) and success (lifted ``lift_height`` and held), of one env or of many (the batched twin's)."""
    lift = target[..., 2] - task.cube_half
    grasped = contacts[..., 0] & contacts[..., 1]
    success = (lift >= task.lift_height) & grasped
    reach = closeness(distance(target, tcp), 0.2)
    grasp = grasped.astype(np.float64)
    lifted = grasp * np.clip(lift / task.lift_height, 0.0, 1.0)
    return staged_reward((reach + grasp + 2.0 * lifted) / 4.0, success), success


class PickColorBatchedEnv(vec.TableTopBatchedEnv):
    """:class:`PickColorEnv` for ``state`` observations, N envs stepped natively a chunk at a time.

    Each env keeps the target and colours its reset drew; colours matter only to rendering.
    """

    TASK: ClassVar[type[TableTopEnv]] = PickColorEnv
    CONTACTS: ClassVar[bool] = True  # grasping the target
    _SAVED: ClassVar[tuple[str, ...]] = (*vec.TableTopBatchedEnv._SAVED, "_target", "_colors")

    def __init__(self, num_envs: int, **kwargs: Any) -> None:
        self._target = np.zeros(num_envs, dtype=np.int64)
        self._colors: list[list[str]] = [list(COLORS)] * num_envs
        super().__init__(num_envs, **kwargs)
        m = self.proto.model
        self._adrs = [int(m.jnt_qposadr[j]) for j in self.proto._joints]

    def _capture(self, i: int) -> None:
        self._target[i], self._colors[i] = self.proto._target, list(self.proto.cube_colors)

    def _restore_visuals(self, i: int) -> None:
        p = self.proto
        p._target, p.cube_colors = int(self._target[i]), list(self._colors[i])
        p.model.geom_rgba[p._geoms] = p._rgba[[list(COLORS).index(c) for c in self._colors[i]]]

    def _contact_geoms(self) -> np.ndarray:
        return self.proto._geoms[self._target]

    def _cubes(self, qpos: np.ndarray) -> np.ndarray:
        """Cube positions [..., 4, 3] in body order."""
        return np.stack([vec.free_pos(qpos, adr) for adr in self._adrs], axis=-2)

    def _observe(self, qpos: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        tcp, opening = vec.robot_state(self.proto, qpos)
        cubes = self._cubes(qpos)
        return np.concatenate([tcp, opening, cubes.reshape(cubes.shape[:-2] + (3 * self.proto.NUM_CUBES,))], axis=-1)

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        tcp, _ = vec.robot_state(self.proto, qpos)
        index = self._target.reshape(-1, *([1] * (qpos.ndim - 2)), 1, 1)  # [N, 1, 1, 1]
        target = np.take_along_axis(self._cubes(qpos), index, axis=-2)[..., 0, :]
        return pick_color_reward(self.proto, tcp, target, contacts)


PickColorEnv._batched_twin = PickColorBatchedEnv

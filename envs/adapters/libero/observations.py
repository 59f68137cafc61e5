"""The numbers a ``LiberoEnv`` observes: the shape of each observation key, and the robot's 8-D state
(``LiberoEnv``'s docstring says what each holds and why)."""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES

ROBOT_STATE_DIM = 8
OBJECT_STATE_DIM = 10  # position 3, quaternion 4, position relative to the end effector 3


def obs_shapes(obs_mode: str, num_objects: int, image_size: int) -> dict[str, tuple[int, ...]]:
    """Each observation key's shape: the one rule behind an env's spaces and ``LiberoEnv.observation_shapes``.
    ``state``: the robot and ``num_objects`` object slots; ``state+rgb``: the robot and both cameras; ``rgb``: the
    cameras."""
    shapes: dict[str, tuple[int, ...]] = {}
    if obs_mode == "state":
        shapes[STATES] = (ROBOT_STATE_DIM + OBJECT_STATE_DIM * num_objects,)
    elif obs_mode == "state+rgb":
        shapes[STATES] = (ROBOT_STATE_DIM,)
    if obs_mode != "state":
        shapes[MAIN_IMAGES] = shapes[WRIST_IMAGES] = (image_size, image_size, 3)
    return shapes


def robot_state(raw_obs: dict[str, Any]) -> np.ndarray:
    """float32 [8]: end-effector position, axis-angle of its quaternion (xyzw), gripper finger qpos."""
    quat = np.asarray(raw_obs["robot0_eef_quat"], dtype=np.float64)
    return np.concatenate([raw_obs["robot0_eef_pos"], quat_to_axis_angle(quat),
                           raw_obs["robot0_gripper_qpos"]]).astype(np.float32)


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """Axis times angle of a unit quaternion (x, y, z, w), as robosuite's ``quat2axisangle``."""
    w = float(np.clip(quat_xyzw[3], -1.0, 1.0))
    den = np.sqrt(1.0 - w * w)
    if np.isclose(den, 0.0):
        return np.zeros(3)
    return quat_xyzw[:3] * 2.0 * np.arccos(w) / den


def mat_to_quat_xyzw(mat: np.ndarray) -> np.ndarray:
    import mujoco

    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, np.asarray(mat, dtype=np.float64).reshape(9))
    return quat[[1, 2, 3, 0]]

"""Reach: move the gripper's tool centre point to a red sphere floating above the table."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from embodied.envs.layout import Region
from embodied.envs.mujoco_base import TableTopEnv, check_positive, distance
from embodied.envs.mujoco_batched import TableTopBatchedEnv, robot_state


class ReachEnv(TableTopEnv):
    """Reach a random target with the TCP.

    ``states`` (float32 [10]): TCP position (3), finger opening in metres (1), target position (3),
    target - TCP (3); positions in metres, table top at z = 0. Dense reward: ``-distance`` (metres,
    so about [-0.6, 0]); sparse reward: ``float(success)``. Success: distance < ``success_threshold``.
    ``layout_shift_x/y`` move the target's region; the target is the only object, so ``layout_swap`` is refused.
    """

    XML_FILE: ClassVar[str] = "reach.xml"
    STATE_DIM: ClassVar[int] = 10
    target_low: ClassVar[np.ndarray] = np.array([-0.2, -0.2, 0.05])
    target_high: ClassVar[np.ndarray] = np.array([0.2, 0.2, 0.3])

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 50,
        image_size: int = 64,
        render_mode: str | None = None,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        success_threshold: float = 0.05,
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
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
            layout_shift_x=layout_shift_x,
            layout_shift_y=layout_shift_y,
            layout_swap=layout_swap,
        )
        self._target_mocap = int(self.model.body_mocapid[self.model.body("target").id])
        self._shadow_mocap = int(self.model.body_mocapid[self.model.body("target_shadow").id])

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        return "reach the red target"

    @property
    def target_pos(self) -> np.ndarray:
        """World position of the target, float64 [3] (a copy)."""
        return self.data.mocap_pos[self._target_mocap].copy()

    def _reset_task(self) -> None:
        # Resample until the target is clearly away from the start, so no episode is won at reset.
        tcp = self.data.mocap_pos[self._mocap]
        for _ in range(100):
            target = self.layout.place(self.np_random, self.target_low, self.target_high)
            if np.linalg.norm(target - tcp) > 2 * self.success_threshold:
                break
        self.data.mocap_pos[self._target_mocap] = target
        self.data.mocap_pos[self._shadow_mocap] = (target[0], target[1], 0.001)

    def _layout_regions(self) -> dict[str, Region]:
        return {"target": Region(self.target_low[:2], self.target_high[:2])}

    def _task_state(self) -> np.ndarray:
        tcp = self.data.site_xpos[self._tcp]
        target = self.data.mocap_pos[self._target_mocap]
        return np.concatenate([tcp, [self.finger_opening], target, target - tcp])

    def _reward_success(self) -> tuple[float, bool]:
        reward, success = reach_reward(self, self.data.site_xpos[self._tcp], self.data.mocap_pos[self._target_mocap])
        return float(reward), bool(success)


def reach_reward(task: ReachEnv, tcp: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reach's reward, the negative distance of the TCP to the target, and its success, of one env's positions [3]
    or of many [..., 3] (the batched twin's)."""
    dist = distance(target, tcp)
    return -dist, dist < task.success_threshold


class ReachBatchedEnv(TableTopBatchedEnv):
    """:class:`ReachEnv` for ``state`` observations, N envs stepped natively a chunk at a time."""

    TASK: ClassVar[type[TableTopEnv]] = ReachEnv
    # Nothing touches anything in Reach (the solver holds only the gripper's weld and the finger limits): starting
    # it cold at every control step moved the state by at most 3e-13 over 200 steps, so a chunk of all envs is one
    # native call on MuJoCo's threads, with no Python between envs (the per-env path is matched to ~1e-12).
    EXACT_WARMSTART: ClassVar[bool] = False

    def _observe(self, qpos: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        tcp, opening = robot_state(self.proto, qpos)
        target = mocap[..., self.proto._target_mocap, :]
        return np.concatenate([tcp, opening, target, target - tcp], axis=-1)

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        tcp, _ = robot_state(self.proto, qpos)
        return reach_reward(self.proto, tcp, mocap[..., self.proto._target_mocap, :])


ReachEnv._batched_twin = ReachBatchedEnv

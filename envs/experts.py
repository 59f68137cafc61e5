"""Scripted experts for the built-in table-top tasks, for demonstrations, baselines and tests.

An expert reads privileged simulator state from ``env.unwrapped`` (object and goal positions,
which cube the instruction names) and returns the same float32 [4] action a policy would:
``dx, dy, dz`` in units of ``max_step`` and the gripper command (-1 closed, +1 open).
Motions are planned on the TCP's mocap target, which an action moves exactly, so the experts
do not fight the gripper's tracking lag.

    expert = expert_for(env)
    obs, info = env.reset(seed=0)
    expert.reset(env)
    obs, reward, terminated, truncated, info = env.step(expert.act(env, obs))
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from embodied.core.types import Obs
from embodied.envs.adapters.libero.env import LiberoObject  # imports no LIBERO until an env is built
from embodied.envs.adapters.libero.expert import LiberoObjectExpert
from embodied.envs.mujoco_base import TableTopEnv
from embodied.envs.pick_color import PickColorEnv
from embodied.envs.pick_place import PickPlaceEnv
from embodied.envs.push import PushEnv
from embodied.envs.reach import ReachEnv
from embodied.envs.stack import StackEnv

OPEN, CLOSE = 1.0, -1.0


class ScriptedExpert(Protocol):
    """A hand-written controller for one task."""

    def reset(self, env: Any) -> None:
        """Forget the last episode; call after ``env.reset``."""

    def act(self, env: Any, obs: Obs) -> np.ndarray:
        """float32 [4] action for the env's current state (``obs`` is what the env returned)."""


def move_to(env: TableTopEnv, target: np.ndarray, grip: float) -> np.ndarray:
    """Action that drives the TCP target toward ``target`` (at most ``max_step`` per axis)."""
    delta = (np.asarray(target, dtype=np.float64) - env.tcp_target) / env.max_step
    return np.append(np.clip(delta, -1.0, 1.0), grip).astype(np.float32)


def move_by(env: TableTopEnv, offset: np.ndarray, grip: float, gain: float = 0.7) -> np.ndarray:
    """Action that shifts the TCP target by ``gain * offset`` (a closed loop on a held object)."""
    return np.append(np.clip(gain * np.asarray(offset) / env.max_step, -1.0, 1.0), grip).astype(np.float32)


class ReachExpert:
    """Straight to the target with the gripper open."""

    def reset(self, env: Any) -> None:
        """Nothing to forget."""

    def act(self, env: Any, obs: Obs) -> np.ndarray:
        """Move toward the target."""
        return move_to(env.unwrapped, env.unwrapped.target_pos, OPEN)


class PushExpert:
    """Get behind the cube on the goal's line (going over it, not through it), then push."""

    push_height = 0.012  # TCP height while pushing: the fingers cover the cube's side
    travel_height = 0.08  # TCP height while moving around: fingertips clear the cube
    standoff = 0.06  # metres behind the cube's centre where a push starts
    contact = 0.037  # cube half-size + half the closed fingers' footprint
    push_speed = 0.5  # fraction of max_step per step while in contact

    def reset(self, env: Any) -> None:
        """Nothing to forget: every step replans from the cube's position."""

    def act(self, env: Any, obs: Obs) -> np.ndarray:
        """Approach the push start, or push along the cube-goal line."""
        u: PushEnv = env.unwrapped
        cube, goal, tcp = u.cube_pos[:2], u.goal_pos[:2], u.tcp_pos
        to_goal = goal - cube
        dist = float(np.linalg.norm(to_goal))
        if dist < 0.005:
            return move_to(u, u.tcp_target, CLOSE)  # there: hold still
        direction = to_goal / dist
        rel = tcp[:2] - cube
        along = float(rel @ direction)
        lateral = float(np.linalg.norm(rel - along * direction))
        if tcp[2] < 0.03 and along < -0.02 and lateral < 0.015:
            # Aim the TCP a little past the contact point (less near the goal, not to throw the cube).
            aim = cube - direction * self.contact + direction * float(np.clip(0.5 * dist, 0.005, 0.02))
            action = move_to(u, (*aim, self.push_height), CLOSE)
            action[:2] = np.clip(action[:2], -self.push_speed, self.push_speed)  # a lunge tips the cube
            return action
        start = cube - direction * self.standoff
        if np.linalg.norm(tcp[:2] - start) <= 0.01:
            return move_to(u, (*start, self.push_height), CLOSE)  # at the start: come down
        if along > -0.04:  # beside or in front of the cube: go around it from above
            if tcp[2] < self.travel_height - 0.02:
                # Rise while backing off: straight up, friction would drag the cube along.
                away = rel / max(float(np.linalg.norm(rel)), 1e-6)
                return move_to(u, (*(tcp[:2] + 0.02 * away), self.travel_height), CLOSE)
            return move_to(u, (*start, max(self.travel_height, tcp[2])), CLOSE)
        return move_to(u, (*start, tcp[2]), CLOSE)  # already behind it: slide over at this height


class PickExpert:
    """Come down over a cube with open fingers, pinch it, then :meth:`carry` it.

    The phases (approach, close, carry, release) are re-checked every step: a cube that slips
    out is approached again.
    """

    hover = 0.07  # metres above the cube's centre while moving over it
    grasp_depth = 0.01  # TCP this far below the cube's centre when closing

    def __init__(self) -> None:
        self.phase = "approach"
        self.timer = 0

    def reset(self, env: Any) -> None:
        """Start over with the approach."""
        self.phase, self.timer = "approach", 0

    # --- per task ---------------------------------------------------------------------------

    def cube(self, env: Any) -> np.ndarray:
        """Position of the cube to pick."""
        return env.cube_pos

    def grasped(self, env: Any) -> bool:
        """Whether the cube to pick is held."""
        return bool(env.is_grasped)

    def carry(self, env: Any, cube: np.ndarray) -> tuple[np.ndarray, bool]:
        """Where the held cube's centre should go next, and whether to let go now."""
        raise NotImplementedError

    def placed(self, env: Any) -> bool:
        """After letting go: whether the cube stayed where it was put (else start over)."""
        return False

    # --- phases -----------------------------------------------------------------------------

    def act(self, env: Any, obs: Obs) -> np.ndarray:
        """One step of the current phase."""
        u = env.unwrapped
        cube, tcp = self.cube(u), u.tcp_pos
        self.timer += 1
        if self.phase == "carry":
            if not self.grasped(u):
                self._switch("approach")
            else:
                target, release = self.carry(u, cube)
                if release:
                    self._switch("release")
                return move_by(u, target - cube, OPEN if release else CLOSE)
        if self.phase == "release":
            if self.timer > 8 and not self.placed(u):  # let go and it did not stay: try again
                self._switch("approach")
            # Open in place, then back off upwards.
            return move_to(u, u.tcp_target + (0.0, 0.0, 0.01 if self.timer > 3 else 0.0), OPEN)
        if self.phase == "close":
            if self.grasped(u) and self.timer >= 3:
                self._switch("carry")
            elif self.timer > 8:
                self._switch("approach")
            return move_to(u, u.tcp_target, CLOSE)
        return self._approach(u, cube, tcp)

    def _approach(self, u: TableTopEnv, cube: np.ndarray, tcp: np.ndarray) -> np.ndarray:
        hover_z = cube[2] + self.hover
        grasp_z = max(cube[2] - self.grasp_depth, u.workspace_low[2])
        if u.finger_opening < 0.07:  # open before coming down (after a miss, too)
            return move_to(u, (*tcp[:2], max(tcp[2], hover_z)), OPEN)
        if np.linalg.norm(tcp[:2] - cube[:2]) > 0.006:
            if tcp[2] < hover_z - 0.02:
                return move_to(u, (*u.tcp_target[:2], hover_z), OPEN)  # up first: do not sweep cubes
            return move_to(u, (*cube[:2], hover_z), OPEN)
        if abs(tcp[2] - grasp_z) < 0.005:
            self._switch("close")
        return move_to(u, (*cube[:2], grasp_z), OPEN)

    def _switch(self, phase: str) -> None:
        self.phase, self.timer = phase, 0

    def resync(self, env: Any) -> None:
        """Re-derive the phase from the state before labelling a state a policy drove into (DAgger), since the
        phase this expert carried along may no longer fit it: the cube held, carry; the TCP still at the grasp
        pose while closing (or just arrived there with open fingers), close; else approach. The timer restarts
        only when the phase changes. A release in progress is left to run."""
        u = env.unwrapped
        if self.phase == "release":
            return
        cube, tcp = self.cube(u), u.tcp_pos
        grasp_z = max(cube[2] - self.grasp_depth, u.workspace_low[2])
        off_xy, off_z = float(np.linalg.norm(tcp[:2] - cube[:2])), abs(float(tcp[2] - grasp_z))
        closing = self.phase == "close" and self.timer <= 8 and off_xy < 0.015 and off_z < 0.015
        arrived = off_xy <= 0.006 and off_z < 0.005 and u.finger_opening >= 0.07
        phase = "carry" if self.grasped(u) else "close" if closing or arrived else "approach"
        if phase != self.phase:
            self._switch(phase)


def _lift_then_move(cube: np.ndarray, goal: np.ndarray, carry_z: float, cube_half: float) -> np.ndarray:
    """Next cube position toward ``goal``: up off the table, across at ``carry_z``, then down."""
    if np.linalg.norm(goal[:2] - cube[:2]) < 0.01:
        return goal
    if cube[2] < cube_half + 0.03:
        return np.array([*cube[:2], carry_z])
    return np.array([*goal[:2], carry_z])


class PickPlaceExpert(PickExpert):
    """Pick the cube, carry it above the table and lower it into the target."""

    def carry(self, env: PickPlaceEnv, cube: np.ndarray) -> tuple[np.ndarray, bool]:
        """Toward the target, never letting go (success is reached while holding)."""
        goal = env.goal_pos
        return _lift_then_move(cube, goal, max(goal[2], env.cube_half + 0.08), env.cube_half), False


class StackExpert(PickExpert):
    """Pick the red cube, bring it over the green one, set it down and open."""

    def cube(self, env: StackEnv) -> np.ndarray:
        """The red cube."""
        return env.top_pos

    def carry(self, env: StackEnv, cube: np.ndarray) -> tuple[np.ndarray, bool]:
        """Over the green cube, then down onto it; let go once it sits there."""
        spot = env.stack_pos + (0.0, 0.0, 0.002)  # set down from 2 mm: no pressing on the green cube
        if np.linalg.norm(cube[:2] - spot[:2]) < 0.01:  # aligned: come down
            return spot, bool(np.linalg.norm(cube - spot) < 0.006)
        above = spot + (0.0, 0.0, 0.03)
        return _lift_then_move(cube, above, above[2] + 0.02, env.cube_half), False

    def placed(self, env: StackEnv) -> bool:
        """The red cube sits on the green one."""
        return env.is_stacked


class PickColorExpert(PickExpert):
    """Pick the cube the instruction names (privileged ``target_index``) and lift it."""

    def cube(self, env: PickColorEnv) -> np.ndarray:
        """The named cube."""
        return env.target_pos

    def carry(self, env: PickColorEnv, cube: np.ndarray) -> tuple[np.ndarray, bool]:
        """Straight up past the success height."""
        return np.array([*cube[:2], env.cube_half + env.lift_height + 0.03]), False


_EXPERTS: tuple[tuple[type[TableTopEnv], type], ...] = (
    (ReachEnv, ReachExpert),
    (PushEnv, PushExpert),
    (PickPlaceEnv, PickPlaceExpert),
    (StackEnv, StackExpert),
    (PickColorEnv, PickColorExpert),
    (LiberoObject, LiberoObjectExpert),  # 500 of 500 fixed init states (benchmarks/libero_object_expert.py)
)


def expert_for(env: Any) -> ScriptedExpert:
    """A fresh scripted expert for ``env`` (wrappers are looked through); ValueError if none fits.

    An env class of any package offers its own by a ``scripted_expert`` class attribute: the expert class (built
    with no arguments; ``reset(env)``, ``act(env, obs)``, ``resync(env)`` if a policy's actions can invalidate a
    phase it keeps, and the classmethod ``check_env_config(env_kwargs) -> str`` if it needs the env built a certain
    way: ``embodied collect`` raises what it returns, before any worker starts). The built-in tasks are mapped here
    instead, so that they stay free of their experts."""
    base = env.unwrapped
    own = getattr(type(base), "scripted_expert", None)
    if own is not None:
        return own()
    for env_cls, expert_cls in _EXPERTS:
        if isinstance(base, env_cls):
            return expert_cls()
    known = ", ".join(cls.__name__ for cls, _ in _EXPERTS)
    raise ValueError(f"no scripted expert for {type(base).__name__}; experts exist for {known}")


def has_expert(target: Any) -> bool:
    """Whether an env class (or an env) has a scripted expert here."""
    cls = target if isinstance(target, type) else type(getattr(target, "unwrapped", target))
    if not isinstance(cls, type):
        return False
    return getattr(cls, "scripted_expert", None) is not None or any(issubclass(cls, env_cls) for env_cls, _ in _EXPERTS)

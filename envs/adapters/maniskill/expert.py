"""ManiSkill's own motion-planning solutions (shipped in the mani-skill wheel) as scripted experts, so that
``embodied collect`` writes demonstrations of ManiSkill tasks as it does of ours::

    embodied collect configs/maniskill_pick_cube_rlpd.yaml --episodes 100 --out data/maniskill_pick_cube_mp

A solution (``mani_skill.examples.motionplanning.panda.solutions``) is a function that drives an env itself: it
computes grasp poses from the scene, plans screw motions to them, then calls ``env.step`` once per control step
of each plan, and plans the next segment from the state the last one left (after a grasp; from the peg's measured
pose). embodied's collect loop instead asks an expert for one action at a time. ``MotionPlanningExpert`` joins the
two without changing either: the solution runs in a thread of its own against a stand-in env whose ``step`` hands
the action over and waits until the collect loop has stepped the real env with it. One side runs at a time, so the
solution always reads the state the last action left, as in ManiSkill's own ``run.py``, and a noisy (DART) action
is followed from where it led.

**The planner is ours, not mplib's.** ManiSkill's solvers build an ``mplib.Planner``; mplib 0.1.1 (ManiSkill's pin)
and 0.2.1 (the newest) are built with a pybind11 older than numpy 2 and crash the process (SIGSEGV) in
``Planner.__init__`` under numpy 2, which this project's stack needs (opencv, pandas). Every Panda solution plans
with ``plan_screw`` alone (no RRT, no collision point clouds), so ``ScrewPlanner`` is that function: mplib 0.1.1's
algorithm (a screw motion to the target, followed by Jacobian pseudo-inverse steps, then TOPP-RA time
parameterization with toppra, mplib's own dependency) on SAPIEN's Pinocchio model of the same articulation
(``create_pinocchio_model``), which works under numpy 2. What it leaves out is mplib's self-collision check along
the path; the solutions' straight-line paths do not need it, and an episode that goes wrong is dropped by collect
(successful episodes only).

The solutions command absolute joint targets. The env runs ``control_mode: pd_joint_pos`` (the targets as they are,
as ManiSkill's motion-planning demonstrations record them) or ``pd_joint_delta_pos`` (each target as a delta from
the current joint positions, what ManiSkill's ``replay_trajectory`` converts them to for RL, and what a policy learns
more easily); ``reset`` refuses any other, naming the field. When a plan ends (or finds no path, which ManiSkill's
runner counts as a failed episode) the expert holds the last target.
"""

from __future__ import annotations

import functools
import importlib
import queue
import threading
import types
from typing import Any, ClassVar

import numpy as np

from embodied.core.types import Obs

# ManiSkill's id -> the name of its solution in mani_skill.examples.motionplanning.panda.solutions (run.py's table,
# less DrawTriangle and DrawSVG, which drive the Panda stick of another solver).
SOLUTIONS: dict[str, str] = {
    "PickCube-v1": "solvePickCube",
    "StackCube-v1": "solveStackCube",
    "PegInsertionSide-v1": "solvePegInsertionSide",
    "PlugCharger-v1": "solvePlugCharger",
    "PlaceSphere-v1": "solvePlaceSphere",
    "PushCube-v1": "solvePushCube",
    "PullCubeTool-v1": "solvePullCubeTool",
    "LiftPegUpright-v1": "solveLiftPegUpright",
    "PullCube-v1": "solvePullCube",
    "StackPyramid-v1": "solveStackPyramid",
}
CONTROL_MODE = "pd_joint_pos"  # what every solution commands: absolute joint targets
# The control modes the expert drives: the plan's targets as they are, or as deltas from the current joint positions
# in units of the arm controller's limit (what ManiSkill's own replay_trajectory converts demonstrations to for RL).
CONTROL_MODES = (CONTROL_MODE, "pd_joint_delta_pos")


class ScrewPlanner:
    """mplib 0.1.1's ``Planner.plan_screw`` on SAPIEN's Pinocchio model (see the module docstring for why).

    The attributes and the one method ManiSkill's Panda solver uses: ``joint_vel_limits`` and ``joint_acc_limits``
    (one per joint that moves ``move_group``: mplib's default of 1, scaled by the solver's 0.9) and
    ``plan_screw(target_pose, qpos, time_step, ...)``, which returns mplib's dict (``status``, ``position`` and
    ``velocity`` of the move-group joints at each control step, ``time``, ``duration``)."""

    def __init__(self, robot: Any, move_group: str, vel_scale: float, acc_scale: float) -> None:
        self.robot = robot  # ManiSkill's Articulation; its CPU articulation is the one of _objs
        self.model = robot._objs[0].create_pinocchio_model()
        self.link = [link.get_name() for link in robot.get_links()].index(move_group)
        self.limits = robot.get_qlimits()[0].cpu().numpy().astype(np.float64)  # [dof, 2]
        qpos = robot.get_qpos()[0].cpu().numpy().astype(np.float64)
        self.model.compute_full_jacobian(qpos)
        moving = np.abs(self.model.get_link_jacobian(self.link, local=False)).sum(axis=0) > 1e-9
        self.group = np.flatnonzero(moving)  # the joints between the root and move_group (mplib's move group)
        self.joint_vel_limits = np.ones(len(self.group)) * vel_scale
        self.joint_acc_limits = np.ones(len(self.group)) * acc_scale

    def plan_screw(self, target_pose: np.ndarray, qpos: np.ndarray, qpos_step: float = 0.1,
                   time_step: float = 0.1, use_point_cloud: bool = False, **_: Any) -> dict[str, Any]:
        """A path along the screw motion from the current ``move_group`` pose to ``target_pose`` ([x, y, z, qw, qx,
        qy, qz] in the world frame), time-parameterized at ``time_step``; ``status`` says whether one was found."""
        import sapien

        if use_point_cloud:
            raise NotImplementedError("ScrewPlanner plans without collision point clouds")
        qpos = np.asarray(qpos, dtype=np.float64).copy()
        base = self.robot.pose.sp
        target = base.inv() * sapien.Pose(np.asarray(target_pose[:3]), np.asarray(target_pose[3:]))
        self.model.compute_forward_kinematics(qpos)
        current = self.model.get_link_pose(self.link)
        twist, theta = _exp_coordinate(target.to_transformation_matrix() @ np.linalg.inv(
            current.to_transformation_matrix()))
        if theta < -1e4:
            return {"status": "screw plan failed."}
        twist = twist * theta
        path = [qpos[self.group].copy()]
        while True:
            self.model.compute_full_jacobian(qpos)
            jac = self.model.get_link_jacobian(self.link, local=False)
            delta_q = np.linalg.pinv(jac) @ twist
            delta_q *= qpos_step / np.linalg.norm(delta_q)
            delta_twist = jac @ delta_q
            last = np.linalg.norm(delta_twist) > np.linalg.norm(twist)
            if last:
                ratio = np.linalg.norm(twist) / np.linalg.norm(delta_twist)
                delta_q, delta_twist = delta_q * ratio, delta_twist * ratio
            qpos += delta_q
            twist = twist - delta_twist
            inside = np.all(qpos >= self.limits[:, 0] - 1e-3) and np.all(qpos <= self.limits[:, 1] + 1e-3)
            if np.linalg.norm(delta_twist) < 1e-4 or not inside:
                return {"status": "screw plan failed"}
            path.append(qpos[self.group].copy())
            if last:
                return self._time_parameterize(np.vstack(path), time_step)

    def _time_parameterize(self, path: np.ndarray, step: float) -> dict[str, Any]:
        """TOPP-RA over the path under the joint velocity and acceleration limits, sampled every ``step``."""
        import toppra
        from toppra import algorithm, constraint

        toppra.setup_logging("WARNING")
        spline = toppra.SplineInterpolator(np.linspace(0, 1, len(path)), path)
        limits = [constraint.JointVelocityConstraint(self.joint_vel_limits),
                  constraint.JointAccelerationConstraint(self.joint_acc_limits)]
        trajectory = algorithm.TOPPRA(limits, spline, parametrizer="ParametrizeConstAccel").compute_trajectory()
        if trajectory is None:
            return {"status": "time parameterization failed"}
        times = np.linspace(0, trajectory.duration, int(trajectory.duration / step))
        return {"status": "Success", "time": times, "position": trajectory(times),
                "velocity": trajectory(times, 1), "acceleration": trajectory(times, 2),
                "duration": trajectory.duration}


def _exp_coordinate(pose: np.ndarray) -> tuple[np.ndarray, float]:
    """The twist (v, w) of unit angle and the angle of a 4x4 rigid transform (mplib's ``pose2exp_coordinate``;
    a pure translation has angle 1 and w = 0; a half turn is refused with angle -1e6, as there)."""
    rotation, translation = pose[:3, :3], pose[:3, 3]
    if np.isclose(np.trace(rotation), 3):
        return np.concatenate([translation, np.zeros(3)]), 1.0
    if np.isclose(np.trace(rotation), -1):
        return np.zeros(6), -1e6
    theta = np.arccos((np.trace(rotation) - 1) / 2)
    omega = np.array([rotation[2, 1] - rotation[1, 2], rotation[0, 2] - rotation[2, 0],
                      rotation[1, 0] - rotation[0, 1]]) / (2 * np.sin(theta))
    skew = np.array([[0, -omega[2], omega[1]], [omega[2], 0, -omega[0]], [-omega[1], omega[0], 0]])
    inv_left_jacobian = np.eye(3) / theta - 0.5 * skew + (1.0 / theta - 0.5 / np.tan(theta / 2)) * skew @ skew
    return np.concatenate([inv_left_jacobian @ translation, omega]), float(theta)


@functools.cache
def _solver_class() -> type:
    """ManiSkill's Panda solver with ``ScrewPlanner`` in place of ``mplib.Planner``."""
    from mani_skill.examples.motionplanning.panda.motionplanner import PandaArmMotionPlanningSolver

    class ScrewSolver(PandaArmMotionPlanningSolver):
        def setup_planner(self) -> ScrewPlanner:
            return ScrewPlanner(self.robot, self.MOVE_GROUP, self.joint_vel_limits, self.joint_acc_limits)

    return ScrewSolver


@functools.cache
def solution(name: str) -> Any:
    """ManiSkill's solution ``name``, planning with ``ScrewPlanner``: the same function over a copy of its module's
    globals in which the solver class is ours (the module itself is left as it is)."""
    solve = getattr(importlib.import_module("mani_skill.examples.motionplanning.panda.solutions"), name)
    scope = {**solve.__globals__, "PandaArmMotionPlanningSolver": _solver_class()}
    return types.FunctionType(solve.__code__, scope, solve.__name__, solve.__defaults__, solve.__closure__)


class _Stop(BaseException):
    """Raised inside a solution's thread to end it (a new episode began, or the expert is dropped)."""


class _JointTargets:
    """ManiSkill's BaseEnv as a solution sees it: all of it, but with ``control_mode`` ``pd_joint_pos`` (the
    solutions assert it), since the solution's actions are joint targets whatever the env runs (the expert
    converts them)."""

    control_mode = CONTROL_MODE

    def __init__(self, base: Any) -> None:
        self._base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


class _Plan:
    """One episode's solution running in its thread, and the two hand-over queues between it and ``act``.

    The thread puts each action it would step with on ``actions`` (None when the solution returns) and then waits on
    ``resume`` until the real env has taken it (True) or the plan is abandoned (False). Each run has queues of its
    own, so a thread abandoned mid-plan can never take a hand-over meant for the next episode's."""

    def __init__(self, solve: Any, base: Any, solution: str) -> None:
        self.actions: queue.Queue[np.ndarray | None] = queue.Queue()
        self.resume: queue.Queue[bool] = queue.Queue()
        self.failure = ""
        self.over = False  # the solution returned and act has seen its end marker
        self.unwrapped = _JointTargets(base)  # what the solution reads the scene, the robot and the mode from
        self._solution = solution
        self.thread = threading.Thread(target=self._run, args=(solve,), daemon=True, name=f"motion-plan {solution}")
        self.thread.start()

    # The env the solution drives: reset does nothing (the collect loop reset the real env), step hands the action
    # over and blocks until the real env took it.
    def reset(self, **_: Any) -> None:
        return None

    def step(self, action: np.ndarray) -> tuple[None, float, bool, bool, dict[str, Any]]:
        self.actions.put(np.asarray(action, dtype=np.float32))
        if not self.resume.get():
            raise _Stop
        return None, 0.0, False, False, {}

    def next_action(self, taken: bool) -> np.ndarray | None:
        """Let the solution go on (``taken``: its last action was stepped) and return its next action; None once
        it is over."""
        if self.over:
            return None
        if taken:
            self.resume.put(True)
        while True:
            try:
                action = self.actions.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.actions.empty():  # ended without its end marker
                    self.failure = self.failure or f"{self._solution}: its thread ended unexpectedly"
                    action = None
                    break
        self.over = action is None
        return action

    def stop(self) -> None:
        """Abandon the plan: its thread, wherever it is, ends at its next hand-over."""
        self.resume.put(False)
        self.thread.join(timeout=10.0)

    def _run(self, solve: Any) -> None:
        try:
            result = solve(self, seed=None, debug=False, vis=False)
            if isinstance(result, int) and result == -1:
                self.failure = f"{self._solution}: no screw path to a target pose"
        except _Stop:
            return
        except Exception as err:  # noqa: BLE001 - ManiSkill's run.py counts any error of a solution as a failed plan
            self.failure = f"{self._solution}: {type(err).__name__}: {err}"
        self.actions.put(None)


class MotionPlanningExpert:
    """A ManiSkill task's motion-planning solution as a scripted expert (``reset(env)``, ``act(env, obs)``).

    ``solution`` (a class attribute, set per task by ``expert_class``) names the function in ManiSkill's solutions
    package. ``failure`` says why the current episode's plan ended early (no path, or the solution raised), else "".
    """

    solution: ClassVar[str]

    def __init__(self) -> None:
        self._plan: _Plan | None = None
        self._taken = False  # act returned the plan's last action: the env has stepped it by the next act
        self._hold: np.ndarray | None = None  # the plan's last joint targets and gripper command
        self._base: Any = None
        self._delta: float | None = None

    @classmethod
    def check_env_config(cls, kwargs: dict[str, Any]) -> str:
        """Why an env built with these ``env.kwargs`` cannot run this expert ("" if it can): ``embodied collect``
        asks before any worker starts."""
        mode = kwargs.get("control_mode")
        if mode in CONTROL_MODES:
            return ""
        return (f"env.kwargs.control_mode: ManiSkill's motion-planning solutions command joint positions; set "
                f"{' or '.join(CONTROL_MODES)} (got {mode!r})")

    @property
    def failure(self) -> str:
        return self._plan.failure if self._plan is not None else ""

    def reset(self, env: Any) -> None:
        """Start the task's solution on the episode ``env`` was just reset to (the last episode's plan is ended)."""
        self.close()
        ours = env.unwrapped
        base = _maniskill_env(ours)
        if base.control_mode not in CONTROL_MODES:
            raise ValueError(
                f"{ours.task.env_id}: ManiSkill's motion-planning solutions command joint positions; set "
                f"env.kwargs.control_mode: {' or '.join(CONTROL_MODES)} (the env runs {base.control_mode!r})")
        self._base = base
        # pd_joint_delta_pos: the arm's action is (target - qpos) / limit, clipped to [-1, 1] (ManiSkill normalizes
        # the controller's [lower, upper] delta to it); None: the targets go to the env as they are.
        arm = base.agent.controller.controllers["arm"]
        self._delta = float(arm.config.upper) if base.control_mode != CONTROL_MODE else None
        qpos = base.agent.robot.get_qpos()[0, :7].cpu().numpy()
        self._hold = np.append(qpos, 1.0).astype(np.float32)  # until the first action: stay, gripper open
        self._plan = _Plan(solution(self.solution), base, self.solution)

    def act(self, env: Any, obs: Obs) -> np.ndarray:
        """The solution's next action (it runs from its last hand-over to the next); the last one once it is over."""
        del env, obs  # the solution reads the scene itself
        if self._plan is None:
            raise RuntimeError("MotionPlanningExpert.act before reset(env)")
        action = self._plan.next_action(self._taken)
        self._taken = action is not None
        if action is not None:
            self._hold = action
        if self._delta is None:
            return self._hold.copy()
        qpos = self._base.agent.robot.get_qpos()[0, :7].cpu().numpy()
        arm = np.clip((self._hold[:7] - qpos) / self._delta, -1.0, 1.0)
        return np.append(arm, self._hold[7:]).astype(np.float32)

    def close(self) -> None:
        """End the current plan's thread, if any."""
        plan, self._plan, self._taken = getattr(self, "_plan", None), None, False
        if plan is not None:
            plan.stop()

    def __del__(self) -> None:
        self.close()


def _maniskill_env(ours: Any) -> Any:
    """ManiSkill's BaseEnv behind an (unwrapped) embodied ManiSkill env."""
    raw = getattr(ours, "env", None)
    if raw is None:
        raise TypeError(f"{type(ours).__name__} is not an embodied ManiSkill env (envs.adapters.maniskill)")
    return raw.unwrapped


def expert_class(maniskill_id: str) -> type[MotionPlanningExpert] | None:
    """The expert class of a ManiSkill task (None if ManiSkill ships no solution for it)."""
    name = SOLUTIONS.get(maniskill_id)
    if name is None:
        return None
    return type(f"MotionPlanningExpert_{maniskill_id.replace('-', '_')}", (MotionPlanningExpert,),
                {"solution": name, "__module__": __name__})

"""``TableTopBatchedEnv``: the batched twin of a built-in task for ``state`` observations.

A ``BatchedEnv`` (``envs/batched.py``) that holds N envs of one task as rows of arrays over one
``MjModel`` and steps a whole chunk of them natively (``envs/mujoco_stepper.py``): per chunk the
delta-TCP actions become mocap targets and finger controls in numpy, ``mujoco.rollout`` runs
C x ``frame_skip`` physics steps per env on threads with the GIL released, and the observations,
rewards, success, termination and truncation of every sub-step are computed vectorised from the
states. It reproduces its per-env task (``TASK``, a ``TableTopEnv``) exactly (Reach to ~1e-13: see
``EXACT_WARMSTART``): same seeds and actions give the same observations, rewards, flags and
``executed`` masks (``tests/envs/test_batched_tasks.py``).

- Resets run the per-env task's own code on one prototype env (``self.proto``) with each env's own
  generator, and copy the resulting state into the env's row: the random draws are the task's, so
  there is nothing to keep in step by hand. They happen only at episode boundaries.
- Sub-steps after an episode ends are simulated (the chunk is one native call) but not executed:
  their rewards are 0, their flags False, and the env's state is the one at its last executed
  sub-step.
- ``rgb`` observations need a renderer per env and stay on the per-env path (``ChunkedVectorEnv``);
  the env factory picks that path by itself for ``rgb`` (``TableTopEnv.batched_twin``), and
  ``env.vectorization: per_env`` picks it for ``state`` too. ``render()`` (eval videos) works here.

A task's twin subclasses this with ``TASK``, ``CONTACTS`` and the vectorised hooks ``_observe``
and ``_reward_success`` (and ``_capture`` / ``_restore_visuals`` when an episode draws more than
the state, as PickColor's target does).
"""

from __future__ import annotations

import pickle
import time
from typing import Any, ClassVar

import mujoco
import numpy as np

from embodied.core import pickles
from embodied.core.numerics import NonFiniteError
from embodied.core.types import STATES, TASK_DESCRIPTIONS, ChunkStepResult, EpisodeStats, Obs
from embodied.envs.batched import check_chunk_actions
from embodied.envs.mujoco_base import FINGER_RANGE, TableTopEnv
from embodied.envs.mujoco_stepper import STATE_SPEC, NativeStepper


class TableTopBatchedEnv:
    """N envs of ``TASK`` with ``state`` observations, stepped a chunk at a time natively.

    Constructed by the env factory as ``cls(num_envs=, auto_reset=, obs_mode=, max_episode_steps=,
    **env.kwargs)`` (``render_mode`` for videos); every task keyword argument is the per-env task's.
    ``nthread`` (None: every core this process may use, at most ``num_envs``) threads step the envs.
    """

    batched: ClassVar[bool] = True  # implements embodied.envs.batched.BatchedEnv
    TASK: ClassVar[type[TableTopEnv]]
    CONTACTS: ClassVar[bool] = False  # the reward or success reads finger contacts (grasps)
    # Carry each env's solver warm start across chunks (one native call per env and chunk); a task whose
    # dynamics a cold start per chunk does not move (to ~1e-12) sets False: one call on all envs.
    EXACT_WARMSTART: ClassVar[bool] = True
    _SAVED: ClassVar[tuple[str, ...]] = ("_ctrl", "_mocap_pos", "_mocap_quat", "_rngs", "_elapsed", "_finished",
                                         "_states", "_tasks", "_ret", "_length", "_success_once", "_success_last",
                                         "_unstable")

    def __init__(self, num_envs: int, auto_reset: bool = True, obs_mode: str = "state",
                 max_episode_steps: int | None = None, render_mode: str | None = None, nthread: int | None = None,
                 **task_kwargs: Any) -> None:
        if "rgb" in obs_mode:
            raise ValueError(
                f"{type(self).__name__} steps state observations only, got obs_mode={obs_mode!r}: rgb needs a "
                f"renderer per env, so rgb runs on the per-env path (ChunkedVectorEnv of {self.TASK.__name__}), which "
                f"the env factory picks by itself for rgb; build {self.TASK.__name__} per env instead")
        if not isinstance(num_envs, (int, np.integer)) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        steps = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        self.proto = self.TASK(obs_mode=obs_mode, render_mode=render_mode, **steps, **task_kwargs)
        p, m = self.proto, self.proto.model
        check_tcp_at_origin(p)
        self.name = f"{type(self).__name__}"
        self.num_envs, self.auto_reset, self.obs_mode = int(num_envs), auto_reset, obs_mode
        self.max_episode_steps = p.max_episode_steps
        self.single_observation_space = p.observation_space
        self.single_action_space = p.action_space
        self.metadata = p.metadata
        self.action_dim = int(p.action_space.shape[0])
        self.progress: tuple[float, int, int, str] | None = None  # read by the env worker's watchdog
        self.stepper = NativeStepper(m, self.num_envs, nthread, tuple(p._finger_geoms) if self.CONTACTS else None,
                                     exact_warmstart=self.EXACT_WARMSTART)
        n = self.num_envs
        self._ctrl = np.zeros((n, m.nu))
        self._mocap_pos = np.zeros((n, m.nmocap, 3))
        self._mocap_quat = np.zeros((n, m.nmocap, 4))
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._elapsed = np.zeros(n, dtype=np.int64)
        self._finished = np.zeros(n, dtype=bool)
        self._states = np.zeros((n, p.STATE_DIM), dtype=np.float32)  # the current observation
        self._tasks = [""] * n
        self._ret, self._length = np.zeros(n), np.zeros(n, dtype=np.int64)
        self._success_once, self._success_last = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        self._unstable = np.zeros(n, dtype=bool)
        self._was_reset = False

    # -- task hooks ----------------------------------------------------------------------------

    def _observe(self, qpos: np.ndarray, mocap: np.ndarray) -> np.ndarray:
        """``states`` float64 [N, K, STATE_DIM] of qpos [N, K, nq] and mocap positions [N, K, nmocap, 3]."""
        raise NotImplementedError

    def _reward_success(self, qpos: np.ndarray, mocap: np.ndarray,
                        contacts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Dense reward float64 [N, K] and success bool [N, K]; ``contacts`` bool [N, K, 2] when ``CONTACTS``."""
        raise NotImplementedError

    def _contact_geoms(self) -> np.ndarray | None:
        """int [N]: the geom of each env whose finger contacts ``_reward_success`` reads."""
        return None

    def _capture(self, i: int) -> None:
        """Keep what the prototype's reset drew for env ``i`` beyond its state (none by default)."""

    def _restore_visuals(self, i: int) -> None:
        """Put env ``i``'s look (e.g. colours) back on the shared model before rendering it."""

    # -- BatchedEnv ----------------------------------------------------------------------------

    @property
    def finished(self) -> np.ndarray:
        """bool [B]: envs whose episode is over and not yet reset (only with ``auto_reset=False``)."""
        return self._finished.copy()

    def reset(self, seed: int | None = None, seeds: list[int] | None = None,
              options: list[dict[str, Any] | None] | None = None) -> Obs:
        """Reset every env (env ``i`` gets ``seed + i``, or ``seeds[i]``); the built-in tasks take no options."""
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"{self.name}: {len(seeds)} seeds for {self.num_envs} envs")
        if options is not None and any(o for o in options):
            raise ValueError(f"{self.name}: the built-in tasks take no reset options, got {options}")
        per_env = list(seeds) if seeds is not None else [None if seed is None else seed + i
                                                         for i in range(self.num_envs)]
        self._reset_rows(list(range(self.num_envs)), per_env)
        self._finished[:] = False
        self._was_reset = True
        return self._obs()

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Run one action chunk float32 [B, C, A] under the chunk-step contract (``envs/chunked.py``)."""
        if not self._was_reset:
            raise RuntimeError(f"{self.name}: call reset() before chunk_step()")
        actions = check_chunk_actions(actions, self.num_envs, self.action_dim, self.name)
        n, chunk = actions.shape[:2]
        active = ~self._finished
        self.progress = (time.monotonic(), -1, 0, "step")
        controls, mocaps, ctrls = self._controls(actions)
        t0 = self.stepper.state[:, 0].copy()
        phys = self.stepper.step(controls, self.proto.frame_skip, active, self._contact_geoms())
        qpos = self.stepper.qpos(phys.states)
        reward, success = self._reward_success(qpos, mocaps, phys.contacts)
        if self.proto.reward_type != "dense":
            reward = success.astype(np.float64)
        unstable = self._unstable_steps(phys.states, t0)
        terminated = success & self.proto.terminate_on_success & ~unstable
        truncated = unstable | (self._elapsed[:, None] + np.arange(1, chunk + 1) >= self.max_episode_steps)
        ended = terminated | truncated
        last = np.where(ended.any(1), ended.argmax(1), chunk - 1)  # the last sub-step each env runs
        executed = active[:, None] & (np.arange(chunk) <= last[:, None])
        dones = active & ended.any(1)
        rows = np.flatnonzero(active)
        states = self._observe(qpos[rows, last[rows]][:, None], mocaps[rows, last[rows]][:, None])[:, 0]
        self._check_finite(states, reward, executed, rows)
        self._commit(rows, last, phys.states, mocaps, ctrls, states)
        self._record(reward, success, executed, unstable, last, active)
        return self._finish_chunk(reward, terminated, truncated, executed, dones)

    def render(self) -> list[np.ndarray]:
        """One RGB frame per env of its current state (needs ``render_mode='rgb_array'``)."""
        frames = []
        for i in range(self.num_envs):
            self._load(i)
            frames.append(self.proto.render())
        return frames

    def close(self) -> None:
        """Stop the stepping threads and free the prototype's renderer."""
        self.stepper.close()
        self.proto.close()

    def expert_chunk_step(self, *args: Any, **kwargs: Any) -> Any:
        """Scripted experts act on per-env envs: collect builds the per-env path (``env.vectorization: per_env``)."""
        raise NotImplementedError(f"{self.name}: scripted experts need the per-env path; build the env with "
                                  "env.vectorization: per_env (embodied collect does)")

    def labelled_chunk_step(self, *args: Any, **kwargs: Any) -> Any:
        """Expert labels come from per-env scripted experts: refused here, as ``expert_chunk_step``."""
        raise NotImplementedError(f"{self.name}: expert labels (an algorithm that trains on them) need the per-env "
                                  "path; build the env with env.vectorization: per_env")

    def get_state(self) -> bytes:
        """Every env mid-episode (integration state, warm start, controls, generators, episode stats), pickled."""
        fields = {name: getattr(self, name) for name in self._SAVED}
        return pickle.dumps((self.stepper.state, self.stepper.warmstart, fields, self._was_reset))

    def set_state(self, state: bytes) -> None:
        """Put back what ``get_state`` saved (a batch of the same size)."""
        sim, warm, fields, was_reset = pickles.loads(state)  # noqa: S301 - the run's own checkpoint
        if sim.shape != self.stepper.state.shape:
            raise ValueError(f"{self.name}: the saved state holds {sim.shape[0]} envs, this batch has {self.num_envs}")
        self.stepper.state[:], self.stepper.warmstart[:] = sim, warm
        for name, value in fields.items():
            setattr(self, name, value)
        self._was_reset = was_reset

    # -- internals -----------------------------------------------------------------------------

    def _reset_rows(self, rows: list[int], seeds: list[int | None]) -> None:
        """Reset envs ``rows`` (``seeds[k]`` for ``rows[k]``) with the per-env task's own code on the prototype,
        each with its own generator; their observations are then computed in one vectorised call."""
        p, data = self.proto, self.proto.data
        for i, seed in zip(rows, seeds):
            self.progress = (time.monotonic(), i, -1, "reset")
            if seed is None:
                p._np_random = self._rngs[i]  # None: gymnasium seeds a fresh one, as a never-seeded env does
            p._reset_state(seed)  # the draws and the state; mj_forward's derived quantities are not read here
            self._rngs[i] = p.np_random
            mujoco.mj_getState(p.model, data, self.stepper.state[i], STATE_SPEC)
            self.stepper.warmstart[i] = data.qacc_warmstart
            self._ctrl[i], self._mocap_pos[i], self._mocap_quat[i] = data.ctrl, data.mocap_pos, data.mocap_quat
            self._tasks[i] = str(p.task_description)
            self._capture(i)
        self._elapsed[rows], self._ret[rows], self._length[rows] = 0, 0.0, 0
        self._success_once[rows] = self._success_last[rows] = self._unstable[rows] = False
        qpos = self.stepper.qpos(self.stepper.state[rows])
        self._states[rows] = self._observe(qpos[:, None], self._mocap_pos[rows][:, None])[:, 0]

    def _load(self, i: int) -> None:
        """Put env ``i``'s state into the prototype (for rendering)."""
        p, data = self.proto, self.proto.data
        mujoco.mj_setState(p.model, data, self.stepper.state[i], STATE_SPEC)
        data.ctrl[:], data.mocap_pos[:], data.mocap_quat[:] = self._ctrl[i], self._mocap_pos[i], self._mocap_quat[i]
        self._restore_visuals(i)
        mujoco.mj_forward(p.model, data)

    def _controls(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each sub-step's control vector [N, C, ncontrol], mocap positions [N, C, nmocap, 3] and ctrl [N, C, nu].

        The arithmetic is ``TableTopEnv._apply_action``'s, in float64, one sub-step after the other: the
        TCP target integrates on the mocap target, clipped into the workspace.
        """
        p = self.proto
        act = np.clip(actions.astype(np.float64), -1.0, 1.0)
        n, chunk = act.shape[:2]
        ctrls = np.repeat(self._ctrl[:, None], chunk, axis=1)
        ctrls[:, :, p._finger_act] = ((act[..., 3] + 1.0) / 2.0 * FINGER_RANGE)[..., None]
        mocaps = np.repeat(self._mocap_pos[:, None], chunk, axis=1)
        step = act[..., :3] * p.max_step
        target, low, high = self._mocap_pos[:, p._mocap], p.workspace_low, p.workspace_high
        for c in range(chunk):  # minimum(maximum()) is np.clip's arithmetic without its Python wrapper
            target = np.minimum(np.maximum(target + step[:, c], low), high)
            mocaps[:, c, p._mocap] = target
        quats = np.repeat(self._mocap_quat[:, None], chunk, axis=1)
        controls = np.concatenate([ctrls, mocaps.reshape(n, chunk, -1), quats.reshape(n, chunk, -1)], axis=2)
        return controls, mocaps, ctrls

    def _unstable_steps(self, states: np.ndarray, t0: np.ndarray) -> np.ndarray:
        """bool [N, C]: MuJoCo reset the state (bad QACC: its clock starts again) or it is not finite."""
        dt = self.proto.model.opt.timestep * self.proto.frame_skip
        expected = t0[:, None] + dt * np.arange(1, states.shape[1] + 1)
        return (states[..., 0] < expected - dt / 2) | ~np.isfinite(states).all(-1)

    def _check_finite(self, states: np.ndarray, reward: np.ndarray, executed: np.ndarray, rows: np.ndarray) -> None:
        bad_reward = executed & ~np.isfinite(reward)
        bad_obs = ~np.isfinite(states).all(-1)
        if bad_reward.any() or bad_obs.any():
            i = int(np.flatnonzero(bad_reward.any(1))[0]) if bad_reward.any() else int(rows[np.flatnonzero(bad_obs)[0]])
            what = "reward" if bad_reward.any() else "observation (states holds NaN or inf)"
            raise NonFiniteError(self.name, i, "a chunk step", f"a non-finite {what}")

    def _commit(self, rows: np.ndarray, last: np.ndarray, states: np.ndarray, mocaps: np.ndarray,
                ctrls: np.ndarray, obs: np.ndarray) -> None:
        """Each stepped env's state, targets and observation at its last executed sub-step."""
        at = last[rows]
        self.stepper.state[rows] = states[rows, at]
        self._mocap_pos[rows], self._ctrl[rows] = mocaps[rows, at], ctrls[rows, at]
        self._elapsed[rows] += at + 1
        self._states[rows] = obs

    def _record(self, reward: np.ndarray, success: np.ndarray, executed: np.ndarray, unstable: np.ndarray,
                last: np.ndarray, active: np.ndarray) -> None:
        """Running episode statistics, added one sub-step at a time as the per-env path does."""
        # One sub-step after the other, as the per-env path adds them (cumsum accumulates in order).
        steps = np.concatenate([self._ret[:, None], np.where(executed, reward, 0.0)], axis=1)
        self._ret = np.cumsum(steps, axis=1)[:, -1]
        self._length += executed.sum(1)
        self._success_once |= (success & executed).any(1)
        ends = np.arange(self.num_envs)
        self._success_last = np.where(active, success[ends, last], self._success_last)
        self._unstable |= (unstable & executed).any(1)

    def _finish_chunk(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                      executed: np.ndarray, dones: np.ndarray) -> ChunkStepResult:
        """Episode records, auto-reset (or stay done) of the envs that ended, and the result."""
        done = np.flatnonzero(dones)
        episodes = [EpisodeStats(int(i), float(self._ret[i]), int(self._length[i]), bool(self._success_once[i]),
                                 bool(self._success_last[i]), self._tasks[i], bool(self._unstable[i])) for i in done]
        terminal = self._states[done].copy()
        if not self.auto_reset:
            self._finished[done] = True
        elif done.size:
            self._reset_rows(done.tolist(), [None] * done.size)
        obs = self._obs()
        final_obs = None
        if done.size:
            final_obs = self._obs()  # rows of envs not done repeat their next obs
            final_obs[STATES][done] = terminal
        rewards = np.where(executed, reward, 0.0).astype(np.float32)
        return ChunkStepResult(obs, rewards, terminated & executed, truncated & executed, executed, dones,
                               final_obs, episodes)

    def _obs(self) -> Obs:
        return {STATES: self._states.copy(), TASK_DESCRIPTIONS: list(self._tasks)}


# -- vectorised kinematics and shaping (the per-env task's formulas on arrays) ----------------------


def free_pos(qpos: np.ndarray, adr: int) -> np.ndarray:
    """World position [..., 3] of a body on a free joint at ``qpos`` address ``adr`` (``mj_kinematics``)."""
    return qpos[..., adr:adr + 3]


def free_quat(qpos: np.ndarray, adr: int) -> np.ndarray:
    """World orientation [..., 4] of a body on a free joint, normalised as ``mju_normalize4`` does."""
    q = qpos[..., adr + 3:adr + 7]
    norm = np.sqrt(q[..., 0] * q[..., 0] + q[..., 1] * q[..., 1] + q[..., 2] * q[..., 2] + q[..., 3] * q[..., 3])
    tiny = norm < mujoco.mjMINVAL
    scale = np.where(np.abs(norm - 1.0) > mujoco.mjMINVAL, 1.0 / np.where(tiny, 1.0, norm), 1.0)
    out = np.where((np.abs(norm - 1.0) > mujoco.mjMINVAL)[..., None], q * scale[..., None], q)
    return np.where(tiny[..., None], np.array([1.0, 0.0, 0.0, 0.0]), out)


def robot_state(env: TableTopEnv, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TCP position [..., 3] and finger opening [..., 1] (the TCP site is the gripper body's origin)."""
    tcp = free_pos(qpos, int(env._gripper_qpos))
    fingers = qpos[..., env._finger_qpos]
    return tcp, (fingers[..., 0] + fingers[..., 1])[..., None]


def check_tcp_at_origin(env: TableTopEnv) -> None:
    """The vectorised TCP is the gripper body's position: true while the ``tcp`` site sits at its origin."""
    m = env.model
    if np.any(m.site_pos[env._tcp] != 0) or m.site_bodyid[env._tcp] != m.jnt_bodyid[m.joint("gripper_free").id]:
        raise ValueError("the batched twin needs the tcp site at the origin of the free gripper body (robot.xml)")

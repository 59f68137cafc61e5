"""``NativeStepper``: the physics of N worlds of one MuJoCo model, a whole action chunk per native call.

The batched built-in tasks (``envs/mujoco_batched.py``) keep every env as rows of arrays (its
integration state, warm start, controls and mocap targets) rather than as an ``MjData`` each. A chunk is
stepped by ``mujoco.rollout`` (C++; it releases the GIL) in one of two ways:

- one native call per env and chunk, on ``nthread`` threads (the calling one and a pool), each with its own
  ``MjData``, over a contiguous slice of the envs. Why not one call for all N worlds: rollout returns
  states, not the solver's warm start (``qacc_warmstart``), and a chunk that starts from another warm start
  than the per-env env's drifts from it (3.6e-6 after 100 PickPlace steps with contacts; 2.4e-5 in Push
  with a cold start every control step). A call on one world leaves that world's warm start in the thread's
  ``MjData``, where it is read back, so the batched path is the per-env one to the last bit. Tasks whose
  reward reads contacts (grasps) step one control step per call instead: after it the thread's ``MjData``
  holds the contacts of the last physics step, exactly what ``TableTopEnv.step`` reads.
- ``exact_warmstart=False`` (Reach, where nothing touches: a cold start moves the state by ~1e-13): one
  call for all N worlds on MuJoCo's own thread pool, with no Python between worlds, each chunk starting
  the solver cold, as the env's reset does.
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import mujoco
import numpy as np
from mujoco import _rollout

STATE_SPEC = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)  # time, qpos, qvel, act, plugin state
# What the task sets between control steps: actuator controls and the mocap targets.
CONTROL_SPEC = int(mujoco.mjtState.mjSTATE_CTRL) | int(mujoco.mjtState.mjSTATE_MOCAP_POS) | int(
    mujoco.mjtState.mjSTATE_MOCAP_QUAT)


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_nthread(nthread: int | None, num_envs: int) -> int:
    """Threads to step with: ``nthread`` (None: every core), at most the cores and the envs.

    More threads than cores only adds switching; the clamp is warned about so that a config copied
    from a bigger machine says what it got.
    """
    cores = available_cores()
    if nthread is None:
        return max(1, min(cores, num_envs))
    if isinstance(nthread, bool) or not isinstance(nthread, (int, np.integer)) or nthread < 1:
        raise ValueError(f"nthread must be a positive integer or None, got {nthread!r}")
    if nthread > cores:
        warnings.warn(f"nthread={nthread} is more than the {cores} CPU cores this process may use; clamped to "
                      f"{cores}", stacklevel=3)
    return max(1, min(int(nthread), cores, num_envs))


@dataclass
class ChunkPhysics:
    """What a chunk of C control steps produced for every env (rows of envs not stepped are stale)."""

    states: np.ndarray  # float64 [N, C, nstate]: the state after each control step
    contacts: np.ndarray | None  # bool [N, C, 2]: left / right finger touched the env's contact geom


class NativeStepper:
    """Integration state of N worlds of ``model``, stepped a chunk at a time on ``nthread`` threads.

    ``state`` [N, nstate] (``mjSTATE_FULLPHYSICS``) and ``warmstart`` [N, nv] are the worlds; the caller
    writes rows on reset and after a chunk (it decides which control step an episode ended at).
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, nthread: int | None,
                 finger_geoms: tuple[int, int] | None = None, exact_warmstart: bool = True) -> None:
        """``finger_geoms`` (left, right): report, per control step, whether each touches the env's contact
        geom (then each control step is its own native call). ``exact_warmstart=False``: a chunk of every env
        is one native call on MuJoCo's own threads, each chunk starting the solver cold (``warmstart`` stays
        as reset left it), for models where that moves nothing that matters (the task says why)."""
        self.model = model
        self.num_envs = num_envs
        self.nthread = resolve_nthread(nthread, num_envs)
        self.nstate = mujoco.mj_stateSize(model, STATE_SPEC)
        self.ncontrol = mujoco.mj_stateSize(model, CONTROL_SPEC)
        self.state = np.zeros((num_envs, self.nstate))
        self.warmstart = np.zeros((num_envs, model.nv))
        self.finger_geoms = finger_geoms
        self.exact_warmstart = exact_warmstart or finger_geoms is not None
        # One call for all worlds on MuJoCo's thread pool (nthread=0: the calling thread), no Python between them.
        batch_threads = self.nthread if self.nthread > 1 else 0
        self._batch = None if self.exact_warmstart else _rollout.Rollout(nthread=batch_threads)
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._rollouts = [_rollout.Rollout(nthread=0) for _ in range(self.nthread)]  # runs on the calling thread
        own_pool = self.nthread > 1 and self._batch is None  # the batch call has MuJoCo's threads
        self._pool = ThreadPoolExecutor(self.nthread - 1, thread_name_prefix="mj-step") if own_pool else None
        bounds = np.linspace(0, num_envs, self.nthread + 1).round().astype(int)
        self._slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]

    def qpos(self, states: np.ndarray) -> np.ndarray:
        """The ``qpos`` part of states [..., nstate]."""
        return states[..., 1:1 + self.model.nq]

    def step(self, controls: np.ndarray, frame_skip: int, active: np.ndarray,
             contact_geoms: np.ndarray | None = None) -> ChunkPhysics:
        """Run C control steps of ``frame_skip`` physics steps for every ``active`` env.

        ``controls`` float64 [N, C, ncontrol] hold each control step's ctrl and mocap targets; envs not
        active are not stepped. ``warmstart`` rows of stepped envs are left at the chunk's end.
        """
        n, chunk = controls.shape[:2]
        per_physics = np.repeat(controls, frame_skip, axis=1)  # [N, C * frame_skip, ncontrol]
        shape = (n, chunk * frame_skip, self.nstate)
        out = np.empty(shape) if active.all() else np.zeros(shape)  # rows of envs not stepped stay 0
        contacts = np.zeros((n, chunk, 2), dtype=bool) if self.finger_geoms is not None else None
        envs = np.flatnonzero(active)
        if self._batch is not None:
            self._all_at_once(envs, per_physics, out)
            return ChunkPhysics(out[:, frame_skip - 1::frame_skip], None)

        def work(k: int) -> None:
            lo, hi = self._slices[k]
            for i in envs[(envs >= lo) & (envs < hi)]:
                if contacts is None:
                    self._whole_chunk(k, int(i), per_physics, out)
                else:
                    self._by_control_step(k, int(i), per_physics, out, frame_skip, contact_geoms, contacts)

        # The calling thread steps the first slice itself: one thread hand-off fewer per chunk.
        futures = [self._pool.submit(work, k) for k in range(1, self.nthread)] if self._pool is not None else []
        work(0)
        for future in futures:
            future.result()
        return ChunkPhysics(out[:, frame_skip - 1::frame_skip], contacts)

    def _all_at_once(self, envs: np.ndarray, controls: np.ndarray, out: np.ndarray) -> None:
        """The chunk of envs ``envs`` as one native call over MuJoCo's threads, each from its stored warm start."""
        if not len(envs):
            return  # every episode is over (auto_reset off): nothing to step
        every = len(envs) == self.num_envs
        start, warm, control = ((self.state, self.warmstart, controls) if every else
                                (self.state[envs], self.warmstart[envs], np.ascontiguousarray(controls[envs])))
        states = out if every else np.empty((len(envs),) + out.shape[1:])
        nstep = controls.shape[1]
        datas = self._datas if self.nthread > 1 else self._datas[:1]
        self._batch.rollout([self.model] * len(envs), datas, nstep, CONTROL_SPEC, start, warm, control, states,
                            np.empty((len(envs), nstep, self.model.nsensordata)), None)
        if not every:
            out[envs] = states

    def _whole_chunk(self, k: int, i: int, controls: np.ndarray, out: np.ndarray) -> None:
        data = self._datas[k]
        nstep = controls.shape[1]
        self._rollouts[k].rollout([self.model], [data], nstep, CONTROL_SPEC, self.state[i:i + 1],
                                  self.warmstart[i:i + 1], controls[i:i + 1], out[i:i + 1], self._sensors(nstep), None)
        self.warmstart[i] = data.qacc_warmstart

    def _by_control_step(self, k: int, i: int, controls: np.ndarray, out: np.ndarray, frame_skip: int,
                         contact_geoms: np.ndarray, contacts: np.ndarray) -> None:
        data, roll = self._datas[k], self._rollouts[k]
        left, right = self.finger_geoms
        start = self.state[i:i + 1]
        for c in range(contacts.shape[1]):
            steps = slice(c * frame_skip, (c + 1) * frame_skip)
            roll.rollout([self.model], [data], frame_skip, CONTROL_SPEC, start, self.warmstart[i:i + 1],
                         np.ascontiguousarray(controls[i:i + 1, steps]), out[i:i + 1, steps],
                         self._sensors(frame_skip), None)
            self.warmstart[i] = data.qacc_warmstart
            start = out[i:i + 1, steps.stop - 1]
            pairs = data.contact.geom[:data.ncon]
            touching = pairs[(pairs == contact_geoms[i]).any(axis=1)]
            contacts[i, c] = (touching == left).any(), (touching == right).any()

    def _sensors(self, steps: int) -> np.ndarray:
        """A sensor output for one world (empty for the built-in scenes, which have no sensors)."""
        return np.empty((1, steps, self.model.nsensordata))

    def close(self) -> None:
        """Stop the threads."""
        self._batch = None  # its threads end with it
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def physics_limit(env: object, num_envs: int, chunk: int, steps: int, nthread: int | None = None) -> tuple[int, float]:
    """Env steps and seconds of ``mujoco.rollout`` alone on ``env``'s model: ``num_envs`` worlds from reset states,
    one chunk (``chunk`` x ``frame_skip`` physics steps) per call, on every core (the ``embodied bench`` baseline
    "native physics limit": no Python between steps, no observations, rewards or resets)."""
    from mujoco import rollout

    model, frame_skip = env.model, env.frame_skip
    nthread = resolve_nthread(nthread, num_envs)
    start = np.empty((num_envs, mujoco.mj_stateSize(model, STATE_SPEC)))
    control = np.empty((num_envs, 1, mujoco.mj_stateSize(model, CONTROL_SPEC)))
    for i in range(num_envs):
        env.reset(seed=i)
        mujoco.mj_getState(model, env.data, start[i], STATE_SPEC)
        mujoco.mj_getState(model, env.data, control[i, 0], CONTROL_SPEC)
    nstep = chunk * frame_skip
    control = np.ascontiguousarray(np.repeat(control, nstep, axis=1))
    out = np.empty((num_envs, nstep, start.shape[1]))
    sensors = np.empty((num_envs, nstep, model.nsensordata))
    datas = [mujoco.MjData(model) for _ in range(nthread)]
    with rollout.Rollout(nthread=nthread if nthread > 1 else 0) as pool:
        def call() -> None:
            pool.rollout([model] * num_envs, datas, start, control, control_spec=CONTROL_SPEC, skip_checks=True,
                         nstep=nstep, state=out, sensordata=sensors)

        call()  # warm-up
        done, t0 = 0, time.perf_counter()
        while done < steps:
            call()
            done += num_envs * chunk
        return done, time.perf_counter() - t0

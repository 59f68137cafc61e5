"""What the built-in MuJoCo table-top tasks share: model loading, delta end-effector control,
observation assembly, offscreen rendering and episode bookkeeping.

A task subclasses :class:`TableTopEnv`, names its MJCF file and implements four hooks:
``_reset_task`` (randomise with ``self.np_random``), ``_task_state`` (the ``states`` vector),
``_dense_reward`` and ``_is_success``.
"""

from __future__ import annotations

import atexit
import os
import weakref
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from embodied.types import MAIN_IMAGES, OBS_MODES, STATES, Obs

ASSETS_ENV_VAR = "EMBODIED_ASSETS"
REWARD_TYPES: tuple[str, ...] = ("dense", "sparse")
FINGER_RANGE = 0.04  # metres each finger travels from closed to open (robot.xml)


class MJCFError(ValueError):
    """An MJCF file could not be compiled; the message names the file and MuJoCo's reason."""


def assets_dir() -> Path:
    """The folder MJCF files are loaded from (``$EMBODIED_ASSETS`` overrides the built-in one)."""
    override = os.environ.get(ASSETS_ENV_VAR)
    return Path(override) if override else Path(__file__).resolve().parents[1] / "assets"


def load_model(xml_file: str | Path) -> mujoco.MjModel:
    """Compile ``xml_file`` (relative paths are looked up in :func:`assets_dir`)."""
    path = Path(xml_file)
    if not path.is_absolute():
        path = assets_dir() / path
    if not path.is_file():
        raise FileNotFoundError(f"MJCF file {path} does not exist (set ${ASSETS_ENV_VAR} to use another folder)")
    try:
        return mujoco.MjModel.from_xml_path(str(path))
    except ValueError as err:  # MuJoCo's message carries the element and line number
        raise MJCFError(f"could not compile MJCF file {path}: {err}") from err


class OffscreenRenderer:
    """One GL context for all the cameras and image sizes an env needs.

    ``mujoco.Renderer`` is tied to a single image size; an env needs two (training images and
    video frames), and a second renderer would mean a second GL context per env. This renders
    into a ``size x size`` corner of one offscreen buffer instead, which gives the same pixels.
    """

    def __init__(self, model: mujoco.MjModel, max_size: int) -> None:
        # The offscreen buffer must hold the largest frame; the model's default is 640x480.
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, max_size)
        model.vis.global_.offheight = max(model.vis.global_.offheight, max_size)
        self._model = model
        self._gl: Any = mujoco.GLContext(max_size, max_size)
        # Registered after the eglTerminate that mujoco.egl registers with its first context, so
        # (atexit being LIFO) it runs before it: freeing after terminate raises EGL errors.
        atexit.register(self.close)
        self._gl.make_current()
        self._context: mujoco.MjrContext | None = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self.scene = mujoco.MjvScene(model, maxgeom=max(100, 2 * model.ngeom))
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED

    def render(self, data: mujoco.MjData, camera_id: int, size: int, cheap: bool) -> np.ndarray:
        """uint8 [size, size, 3] from camera ``camera_id``; ``cheap`` turns shadows and reflections off."""
        if self._context is None:
            raise RuntimeError("render() called after close()")
        self._gl.make_current()
        self._camera.fixedcamid = camera_id
        mujoco.mjv_updateScene(
            self._model, data, self._option, None, self._camera, mujoco.mjtCatBit.mjCAT_ALL, self.scene
        )
        # Set after every update: the training camera never pays for shadow or reflection passes.
        self.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = not cheap
        self.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = not cheap
        rect = mujoco.MjrRect(0, 0, size, size)
        mujoco.mjr_render(rect, self.scene, self._context)
        pixels = np.empty((size, size, 3), dtype=np.uint8)
        mujoco.mjr_readPixels(pixels, None, rect, self._context)
        return np.ascontiguousarray(pixels[::-1])  # OpenGL rows run bottom-up

    def close(self) -> None:
        """Free the GL resources now (safe to call twice)."""
        atexit.unregister(self.close)
        if self._context is not None:
            self._gl.make_current()
            self._context.free()
            self._context = None
        if self._gl is not None:
            self._gl.free()
            self._gl = None


class TableTopEnv(gym.Env):
    """Base of the table-top tasks: a mocap gripper above a table, driven by delta TCP actions.

    Action: float32 [4] in [-1, 1]: ``dx, dy, dz`` times ``max_step`` metres move the TCP target
    (clipped into ``workspace_low .. workspace_high``), and the gripper command (-1 closed,
    +1 open). Observation: a dict with ``states`` float32 [STATE_DIM] and/or ``main_images``
    uint8 [image_size, image_size, 3], per ``obs_mode``. ``info["success"]`` is set on every
    reset and step; episodes are truncated after ``max_episode_steps`` steps.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}

    XML_FILE: ClassVar[str] = ""  # relative to assets_dir()
    STATE_DIM: ClassVar[int] = 0
    workspace_low: ClassVar[np.ndarray] = np.array([-0.25, -0.25, 0.01])
    workspace_high: ClassVar[np.ndarray] = np.array([0.25, 0.25, 0.35])
    # Where the TCP starts each episode (a sub-box of the workspace).
    gripper_init_low: ClassVar[np.ndarray] = np.array([-0.15, -0.15, 0.1])
    gripper_init_high: ClassVar[np.ndarray] = np.array([0.15, 0.15, 0.3])

    def __init__(
        self,
        obs_mode: str = "state",
        max_episode_steps: int = 50,
        image_size: int = 64,
        render_mode: str | None = None,
        render_size: int = 128,
        reward_type: str = "dense",
        terminate_on_success: bool = True,
        frame_skip: int = 5,
        max_step: float = 0.05,
    ) -> None:
        _check_choice("obs_mode", obs_mode, OBS_MODES)
        _check_choice("reward_type", reward_type, REWARD_TYPES)
        _check_choice("render_mode", render_mode, (None, *self.metadata["render_modes"]))
        for name, value in (("max_episode_steps", max_episode_steps), ("image_size", image_size),
                            ("render_size", render_size), ("frame_skip", frame_skip)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not max_step > 0:
            raise ValueError(f"max_step must be positive, got {max_step!r}")
        self.obs_mode = obs_mode
        self.max_episode_steps = int(max_episode_steps)
        self.image_size = int(image_size)
        self.render_mode = render_mode
        self.render_size = int(render_size)
        self.reward_type = reward_type
        self.terminate_on_success = terminate_on_success
        self.frame_skip = int(frame_skip)
        self.max_step = float(max_step)

        self.model = load_model(self.XML_FILE)
        self.data = mujoco.MjData(self.model)
        self._bind_robot()
        self._renderer: OffscreenRenderer | None = None  # created on the first frame
        self._elapsed: int | None = None  # None until the first reset
        self.metadata = {**self.metadata, "render_fps": round(1.0 / (self.model.opt.timestep * self.frame_skip))}

        self.action_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        obs_spaces: dict[str, spaces.Space] = {}
        if "state" in obs_mode:
            obs_spaces[STATES] = spaces.Box(-np.inf, np.inf, shape=(self.STATE_DIM,), dtype=np.float32)
        if "rgb" in obs_mode:
            obs_spaces[MAIN_IMAGES] = spaces.Box(0, 255, shape=(self.image_size, self.image_size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)

    def _bind_robot(self) -> None:
        """Look up the robot's ids once (name lookups are too slow for every step)."""
        m = self.model
        body = m.body("gripper_mocap").id
        self._mocap = int(m.body_mocapid[body])
        self._gripper_qpos = m.jnt_qposadr[m.joint("gripper_free").id]
        self._gripper_dof = m.jnt_dofadr[m.joint("gripper_free").id]
        self._finger_qpos = np.array([m.jnt_qposadr[m.joint(f"finger_{s}_joint").id] for s in ("left", "right")])
        self._finger_act = np.array([m.actuator(f"finger_{s}_act").id for s in ("left", "right")])
        self._tcp = m.site("tcp").id
        self._main_camera = m.camera("main").id

    # --- task hooks -------------------------------------------------------------------------

    @property
    def task_description(self) -> str:
        """The instruction a language-conditioned policy receives."""
        raise NotImplementedError

    def _reset_task(self) -> None:
        """Randomise the scene with ``self.np_random`` (the robot is already reset)."""
        raise NotImplementedError

    def _task_state(self) -> np.ndarray:
        """The ``states`` observation, [STATE_DIM]."""
        raise NotImplementedError

    def _dense_reward(self) -> float:
        """Shaped reward for the current state, roughly in [-1, 1]."""
        raise NotImplementedError

    def _is_success(self) -> bool:
        """Whether the task is solved in the current state."""
        raise NotImplementedError

    # --- robot ------------------------------------------------------------------------------

    @property
    def tcp_pos(self) -> np.ndarray:
        """World position of the gripper's tool centre point, float64 [3] (a copy)."""
        return self.data.site_xpos[self._tcp].copy()

    @property
    def finger_opening(self) -> float:
        """Distance between the fingers in metres (0 closed .. 2 * FINGER_RANGE open)."""
        return float(self.data.qpos[self._finger_qpos].sum())

    def _place_gripper(self, pos: np.ndarray, opening: float = 1.0) -> None:
        """Teleport the TCP (and its mocap target) to ``pos`` at rest; ``opening`` in [-1, 1]."""
        qpos = self._gripper_qpos
        self.data.qpos[qpos : qpos + 3] = pos
        self.data.qpos[qpos + 3 : qpos + 7] = (1.0, 0.0, 0.0, 0.0)
        self.data.qvel[self._gripper_dof : self._gripper_dof + 6] = 0.0
        self.data.mocap_pos[self._mocap] = pos
        self.data.mocap_quat[self._mocap] = (1.0, 0.0, 0.0, 0.0)
        finger = (opening + 1.0) / 2.0 * FINGER_RANGE
        self.data.qpos[self._finger_qpos] = finger
        self.data.ctrl[self._finger_act] = finger

    def _apply_action(self, action: np.ndarray) -> None:
        # Integrate on the mocap target, not the measured TCP, so that a held +1 moves exactly
        # max_step per step whatever the tracking lag.
        target = self.data.mocap_pos[self._mocap] + action[:3] * self.max_step
        self.data.mocap_pos[self._mocap] = np.clip(target, self.workspace_low, self.workspace_high)
        self.data.ctrl[self._finger_act] = (action[3] + 1.0) / 2.0 * FINGER_RANGE

    # --- gymnasium API ----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """Start an episode; ``seed`` reseeds ``self.np_random`` (gymnasium convention)."""
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self._place_gripper(self.np_random.uniform(self.gripper_init_low, self.gripper_init_high))
        self._reset_task()
        mujoco.mj_forward(self.model, self.data)
        self._elapsed = 0
        return self._get_obs(), {"success": self._is_success()}

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        """Advance one control step (``frame_skip`` physics steps)."""
        if self._elapsed is None:
            raise RuntimeError("call reset() before step()")
        self._apply_action(self._check_action(action))
        mujoco.mj_step(self.model, self.data, self.frame_skip)
        # mj_step leaves derived quantities (site_xpos...) one sub-step stale; refresh them.
        mujoco.mj_kinematics(self.model, self.data)
        self._elapsed += 1
        success = self._is_success()
        reward = self._dense_reward() if self.reward_type == "dense" else float(success)
        terminated = bool(success and self.terminate_on_success)
        truncated = self._elapsed >= self.max_episode_steps
        return self._get_obs(), float(reward), terminated, truncated, {"success": success}

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The ``main`` camera at ``render_size`` (with shadows) when ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        return self._render_camera(self._main_camera, self.render_size, cheap=False)

    def close(self) -> None:
        """Free the renderer now: left to interpreter exit, EGL tear-down errors out."""
        if self._renderer is not None:
            self._renderer_finalizer()
            self._renderer = None

    # --- helpers ----------------------------------------------------------------------------

    def _check_action(self, action: np.ndarray) -> np.ndarray:
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (4,):
            raise ValueError(f"action must have shape (4,), got {action.shape}")
        if not np.isfinite(action).all():
            raise ValueError(f"action contains NaN or inf: {action}")
        return np.clip(action, -1.0, 1.0)

    def _get_obs(self) -> Obs:
        obs: Obs = {}
        if STATES in self.observation_space.spaces:
            obs[STATES] = np.asarray(self._task_state(), dtype=np.float32)
        if MAIN_IMAGES in self.observation_space.spaces:
            obs[MAIN_IMAGES] = self._render_camera(self._main_camera, self.image_size, cheap=True)
        return obs

    def _render_camera(self, camera_id: int, size: int, cheap: bool) -> np.ndarray:
        if self._renderer is None:
            sizes = [self.render_size if self.render_mode else 0, self.image_size if "rgb" in self.obs_mode else 0]
            self._renderer = OffscreenRenderer(self.model, max(sizes + [size]))
            # Also freed when the env is garbage-collected without close().
            self._renderer_finalizer = weakref.finalize(self, self._renderer.close)
        return self._renderer.render(self.data, camera_id, size, cheap)


def _check_choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

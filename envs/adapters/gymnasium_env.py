"""``GymnasiumEnv``: any env registered with gymnasium, behind the observation contract.

The wrapped env is built with ``gymnasium.make(id, max_episode_steps=..., render_mode=..., **make_kwargs)``
and translated, step by step, into what ``envs.chunked.ChunkedVectorEnv`` expects:

- observations become a dict: ``states`` float32 [S] is the flattened observation (a ``Dict``
  observation, such as a goal-conditioned ``observation``/``achieved_goal``/``desired_goal`` one,
  is concatenated key by key, see ``GymnasiumEnv.state_slices``); ``main_images`` uint8
  [image_size, image_size, 3] is the env's ``render()`` in ``rgb_array`` mode;
- ``info["success"]`` is a bool on every reset and step, from ``info["is_success"]`` or
  ``info["success"]`` when the env reports one, else False;
- episodes end by the env's own ``terminated`` and by gymnasium's ``TimeLimit`` (``truncated``
  after ``max_episode_steps`` steps): the chunked vector env reads both as they are, and no
  gymnasium autoreset is involved;
- actions are a flat float32 ``Box``, clipped to the env's bounds before they are passed on.
  Discrete action spaces are refused (the policies emit continuous actions).

``embodied.registry`` falls back on this class for any ``env.id`` that is registered with
gymnasium (``gymnasium.envs.registry``) but not with embodied, so ``env.id: HalfCheetah-v5`` works.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from embodied.types import MAIN_IMAGES, OBS_MODES, STATES, Obs

# Goal-conditioned observations (gymnasium-robotics' GoalEnv) are concatenated in this order;
# any other keys of a Dict observation follow in the space's own order.
GOAL_KEYS: tuple[str, ...] = ("observation", "achieved_goal", "desired_goal")


class GymnasiumEnv(gym.Env):
    """A gymnasium env (made from its registered ``id``) with ``states``/``main_images`` observations.

    ``obs_mode`` picks the keys (``state``, ``rgb``, ``state+rgb``). Frames come from the env's
    ``render()``; when ``rgb`` observations are asked for, the env is made with ``render_mode=
    "rgb_array"`` and ``width``/``height`` of ``image_size`` (dropped if its constructor refuses
    them), and frames of another size are resized (nearest neighbour). ``render()`` returns the
    env's frame when this adapter was made with ``render_mode="rgb_array"``. ``task_description``
    is what a language-conditioned policy reads ("" unless given). Every other keyword goes to
    ``gymnasium.make`` and so to the env's constructor.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        id: str,  # noqa: A002 - gymnasium's own name for it
        obs_mode: str = "state",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        image_size: int = 64,
        task_description: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        if obs_mode not in OBS_MODES:
            raise ValueError(f"{id}: obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"{id}: render_mode must be None or 'rgb_array', got {render_mode!r}")
        for name, value in (("max_episode_steps", max_episode_steps), ("image_size", image_size)):
            positive_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0
            if not positive_int and not (value is None and name == "max_episode_steps"):
                raise ValueError(f"{id}: {name} must be a positive integer, got {value!r}")
        self.id = id
        self.obs_mode = obs_mode
        self.render_mode = render_mode
        self.image_size = int(image_size)
        self.task_description = "" if task_description is None else str(task_description)
        self.env = self._make(id, max_episode_steps, make_kwargs)
        try:
            self._check_render_support()
            self._setup_action_space(self.env.action_space)
            self._setup_observation_space(self.env.observation_space)
        except Exception:
            self.env.close()
            raise
        self.max_episode_steps = self.env.spec.max_episode_steps if self.env.spec is not None else max_episode_steps
        self.metadata = {**self.metadata, "render_fps": self.env.metadata.get("render_fps", 30)}
        self._closed = False

    # -- construction ------------------------------------------------------------------------

    def _make(self, id: str, max_episode_steps: int | None, make_kwargs: dict[str, Any]) -> gym.Env:  # noqa: A002
        wants_frames = "rgb" in self.obs_mode or self.render_mode == "rgb_array"
        kwargs = dict(make_kwargs)
        if wants_frames:
            kwargs["render_mode"] = "rgb_array"
        size = {}
        if "rgb" in self.obs_mode and not {"width", "height"} & set(kwargs):
            size = {"width": self.image_size, "height": self.image_size}
        try:
            return gym.make(id, max_episode_steps=max_episode_steps, **kwargs, **size)
        except TypeError as err:  # a constructor without width/height: render at its size, resize
            if not size or not ("width" in str(err) or "height" in str(err)):
                raise
        return gym.make(id, max_episode_steps=max_episode_steps, **kwargs)

    def _check_render_support(self) -> None:
        modes = self.env.metadata.get("render_modes", [])
        if ("rgb" in self.obs_mode or self.render_mode) and "rgb_array" not in modes:
            raise ValueError(f"{self.id}: obs_mode={self.obs_mode!r} / render_mode={self.render_mode!r} need "
                             f"frames, but the env renders only {modes}")

    def _setup_action_space(self, space: gym.spaces.Space) -> None:
        if not isinstance(space, spaces.Box):
            raise TypeError(f"gymnasium env {self.id!r} has a {type(space).__name__} action space ({space}); "
                            f"embodied policies emit continuous actions, so only Box action spaces are supported")
        self._env_action_space = space
        self.action_space = spaces.Box(
            low=space.low.reshape(-1).astype(np.float32), high=space.high.reshape(-1).astype(np.float32),
            dtype=np.float32,
        )

    def _setup_observation_space(self, space: gym.spaces.Space) -> None:
        obs_spaces: dict[str, spaces.Space] = {}
        self.state_slices: dict[str, slice] = {}  # where each key of a Dict observation sits in ``states``
        if "state" in self.obs_mode:
            self._state_keys = self._order_keys(space) if isinstance(space, spaces.Dict) else None
            parts = [(k, space[k]) for k in self._state_keys] if self._state_keys is not None else [(None, space)]
            start = 0
            for key, sub in parts:
                try:
                    dim = spaces.flatdim(sub)
                except (ValueError, NotImplementedError) as err:
                    where = f"observation key {key!r}" if key is not None else "observation"
                    raise TypeError(f"gymnasium env {self.id!r}: its {where} ({sub}) cannot be flattened "
                                    f"into a state vector: {err}") from err
                if key is not None:
                    self.state_slices[key] = slice(start, start + dim)
                start += dim
            obs_spaces[STATES] = spaces.Box(-np.inf, np.inf, shape=(start,), dtype=np.float32)
        if "rgb" in self.obs_mode:
            size = self.image_size
            obs_spaces[MAIN_IMAGES] = spaces.Box(0, 255, shape=(size, size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)

    @staticmethod
    def _order_keys(space: spaces.Dict) -> list[str]:
        keys = list(space.spaces)
        return [k for k in GOAL_KEYS if k in keys] + [k for k in keys if k not in GOAL_KEYS]

    # -- gymnasium API -----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._obs(obs), self._info(info)

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        space = self._env_action_space
        action = np.asarray(action, dtype=np.float32).reshape(self.action_space.shape)
        action = np.clip(action, self.action_space.low, self.action_space.high)
        obs, reward, terminated, truncated, info = self.env.step(action.reshape(space.shape).astype(space.dtype))
        return self._obs(obs), float(reward), bool(terminated), bool(truncated), self._info(info)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The env's frame (uint8 [H, W, 3]) when made with ``render_mode="rgb_array"``, else None."""
        if self.render_mode != "rgb_array":
            return None
        return self._postprocess_frame(np.asarray(self.env.render(), dtype=np.uint8))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.env.close()

    # -- translation -------------------------------------------------------------------------

    def _obs(self, obs: Any) -> Obs:
        out: Obs = {}
        if STATES in self.observation_space.spaces:
            space = self.env.observation_space
            if self._state_keys is None:
                flat = [spaces.flatten(space, obs)]
            else:
                flat = [spaces.flatten(space[k], obs[k]) for k in self._state_keys]
            out[STATES] = np.concatenate([np.asarray(f, dtype=np.float32).reshape(-1) for f in flat])
        if MAIN_IMAGES in self.observation_space.spaces:
            out[MAIN_IMAGES] = self._image(self.env.render())
        return out

    def _image(self, frame: Any) -> np.ndarray:
        frame = self._postprocess_frame(np.asarray(frame, dtype=np.uint8))
        size = self.image_size
        if frame.ndim != 3 or frame.shape[2] < 3:
            raise ValueError(f"{self.id}: render() gave a frame of shape {frame.shape}, not [H, W, 3]")
        if frame.shape[:2] != (size, size):  # nearest neighbour, no extra dependency
            rows = (np.arange(size) * frame.shape[0]) // size
            cols = (np.arange(size) * frame.shape[1]) // size
            frame = frame[rows[:, None], cols[None, :]]
        return np.array(frame[..., :3], dtype=np.uint8, copy=True)  # the renderer may reuse its buffer

    def _postprocess_frame(self, frame: np.ndarray) -> np.ndarray:
        """Hook for suites whose cameras need fixing (e.g. rotated); identity here."""
        return frame

    @staticmethod
    def _info(info: dict[str, Any]) -> dict[str, Any]:
        success = info.get("is_success", info.get("success", False))
        return {**info, "success": bool(np.asarray(success).any())}

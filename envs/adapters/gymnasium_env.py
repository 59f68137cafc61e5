"""``GymnasiumEnv``: any gymnasium env, by registered id or by class, behind the observation contract.

Which path an env entry point takes (``plug_in`` decides, when ``embodied.core.registry.ENVS`` resolves
a name, so ``embodied train``, ``embodied check-env`` and ``embodied list envs`` all agree):

1. a ``BatchedEnv`` (class attribute ``batched = True``): built directly, unchanged;
2. a class whose constructor names both ``obs_mode`` and ``max_episode_steps``: embodied's own
   convention (the built-in tasks, this adapter's subclasses), called as it is, the fast path with
   no adapter; its observation space must be a ``Dict`` with embodied's keys, which
   ``embodied.env_runtime.factory`` checks when it is built;
3. any other ``gymnasium.Env`` subclass (a plain gymnasium class, taking neither): wrapped in
   ``GymnasiumEnv``, exactly as a gymnasium id is;
4. a function, ``functools.partial`` or other callable that is not a class: called as it is, with
   the convention's arguments (a factory of a plain gymnasium env: name the class instead).

A class whose constructor names ``obs_mode`` but not ``max_episode_steps`` is ambiguous, and any
other class is not a gymnasium env: both are refused (``PluginError``) with the fix. What the
adapter cannot translate (a Discrete action space, images only in ``state`` mode, frames from an
env that cannot render) is a ``PluginError`` too, raised when the env is built.

The wrapped env is built with ``gymnasium.make(id, max_episode_steps=..., render_mode=...,
**make_kwargs)`` for an id, or for a class with ``cls(**env.kwargs)``, given ``render_mode`` only
when its constructor takes it and ``max_episode_steps`` only when it names it, and wrapped in
gymnasium's ``TimeLimit`` either way. It is translated, step by step, into what
``embodied.envs.chunked.ChunkedVectorEnv`` expects:

- observations become a dict. Image-like entries (``Box`` uint8 [H, W, 3]: the whole observation,
  or entries of a ``Dict``) become ``main_images``, a second one ``wrist_images`` (an entry already
  named so keeps its name; further ones are dropped with a warning), kept at their own size. Every
  other entry is flattened and concatenated into ``states`` float32 [S], float64 and integer
  observations converted (goal-conditioned ``observation``/``achieved_goal``/``desired_goal`` keys
  first, see ``GymnasiumEnv.state_slices``). ``obs_mode`` picks the keys; ``rgb`` of an env with no
  image observations reads its ``render()`` in ``rgb_array`` mode, resized to ``image_size``;
- ``info["success"]`` is a bool on every reset and step: ``info[success_key]`` when the option is
  given (a step without that key is an error), else ``info["is_success"]`` or ``info["success"]``,
  else False;
- ``task_description`` is the option's string when given, else the env's own ``task_description``
  attribute (a string, or a callable returning one, read at every reset), else "";
- episodes end by the env's own ``terminated``/``truncated`` and by ``TimeLimit`` (``truncated``
  after ``max_episode_steps`` steps); no gymnasium autoreset is involved;
- actions are a flat float32 ``Box``, clipped to the env's bounds and cast back to its dtype and
  shape. Discrete action spaces are refused (the policies emit continuous actions).

The adapter's own options (``image_size``, ``task_description``, ``success_key``) come from
``env.kwargs`` like the constructor's arguments; a wrapped class that names one gets it too.

``embodied.core.registry`` falls back on this class for any ``env.id`` that is registered with
gymnasium (``gymnasium.envs.registry``) but not with embodied, so ``env.id: HalfCheetah-v5`` works.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

from embodied.core.registry import PluginError
from embodied.core.types import MAIN_IMAGES, OBS_MODES, STATES, WRIST_IMAGES, Obs
from embodied.envs.batched import is_batched

# Goal-conditioned observations (gymnasium-robotics' GoalEnv) are concatenated in this order;
# any other keys of a Dict observation follow in the space's own order.
GOAL_KEYS: tuple[str, ...] = ("observation", "achieved_goal", "desired_goal")
# What makes a constructor embodied's convention (path 2 above).
CONVENTION: tuple[str, ...] = ("obs_mode", "max_episode_steps")
# The adapter's options, taken from env.kwargs (and passed on to a class that names them too).
ADAPTER_OPTIONS: tuple[str, ...] = ("image_size", "task_description", "success_key")
IMAGE_SLOTS: tuple[str, ...] = (MAIN_IMAGES, WRIST_IMAGES)

PLAIN_FIX = ("a plain gymnasium class (one whose constructor takes neither obs_mode nor max_episode_steps) "
             "goes through the gymnasium adapter, which maps Box or Dict observations onto embodied's keys")


def describe(target: Any) -> str:
    """``package.module.Class`` of a class or function, else its repr."""
    qualname = getattr(target, "__qualname__", None)
    return f"{target.__module__}.{qualname}" if qualname else repr(target)


def constructor_parameters(target: Callable[..., Any]) -> dict[str, inspect.Parameter] | None:
    """The parameters ``target`` accepts, or None when Python cannot tell (builtins, C extensions)."""
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return None


def takes_any_keyword(params: dict[str, inspect.Parameter] | None) -> bool:
    return params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def plug_in(target: Any, name: str) -> Any:
    """The constructor the framework calls for the env entry point ``target`` (``env.id: name``).

    See the module docstring for the rule; raises ``PluginError`` (with the fix) for a class that
    is ambiguous or is not a gymnasium env.
    """
    if is_batched(target):
        return target
    if not isinstance(target, type):
        if callable(target):
            return target
        raise PluginError(f"env {name!r} is {type(target).__name__} {target!r}, not an env class: name a "
                          f"gymnasium.Env subclass ('package.module:Class'), a gymnasium id, or a BatchedEnv class")
    if issubclass(target, GymnasiumEnv):
        return target
    params = constructor_parameters(target) or {}
    takes = [p for p in CONVENTION if p in params]
    if takes == list(CONVENTION):
        return target
    if "obs_mode" in takes:
        raise PluginError(
            f"env {name!r} ({describe(target)}): its constructor takes obs_mode but not max_episode_steps, so it "
            f"is neither embodied's constructor convention (both) nor a plain gymnasium class (no obs_mode). Fix: "
            f"add a max_episode_steps parameter (and truncate episodes after that many steps), or rename obs_mode "
            f"if it is not embodied's, so that {PLAIN_FIX}")
    if issubclass(target, gym.Env):
        adapted = functools.partial(GymnasiumEnv, target)
        adapted.__qualname__ = f"{target.__qualname__} through GymnasiumEnv"  # what tools print for it
        return adapted
    raise PluginError(
        f"env {name!r} ({describe(target)}) is not a gymnasium env: it subclasses neither gymnasium.Env nor "
        f"follows embodied's conventions. Fix: make it a gymnasium.Env subclass (observation_space, action_space, "
        f"reset(seed=...) -> (obs, info), step(action) -> (obs, reward, terminated, truncated, info)), or a "
        f"BatchedEnv (class attribute batched = True, see envs/batched.py)")


def adapted_target(target: Any) -> str | type | None:
    """The gymnasium id or class that ``target`` wraps when it is ``GymnasiumEnv`` bound to one, else None."""
    if isinstance(target, functools.partial) and target.func is GymnasiumEnv and target.args:
        return target.args[0]
    return None


def is_image_space(space: spaces.Space) -> bool:
    """A Box of uint8 [H, W, 3]: an RGB camera."""
    return (isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
            and space.shape[-1] == 3)


class GymnasiumEnv(gym.Env):
    """A gymnasium env (a registered ``id`` or a ``gymnasium.Env`` class) with embodied's observations.

    ``obs_mode`` picks the keys (``state``, ``rgb``, ``state+rgb``). Frames for ``rgb`` come from the
    env's image observations, or from its ``render()`` when it has none: the env is then made with
    ``render_mode="rgb_array"`` (a class: only if its constructor takes ``render_mode``) and, for an
    id, ``width``/``height`` of ``image_size`` (dropped if its constructor refuses them), and frames
    of another size are resized (nearest neighbour). ``render()`` returns the env's frame when this
    adapter was made with ``render_mode="rgb_array"``. ``task_description`` and ``success_key`` are
    described in the module docstring. Every other keyword goes to ``gymnasium.make`` (an id) or to
    the class's constructor.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        id: str | type[gym.Env],  # noqa: A002 - gymnasium's own name for it
        obs_mode: str = "state",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        image_size: int = 64,
        task_description: str | None = None,
        success_key: str | None = None,
        **make_kwargs: Any,
    ) -> None:
        self.env_class = id if isinstance(id, type) else None
        self.id = f"{id.__module__}:{id.__qualname__}" if isinstance(id, type) else str(id)
        if obs_mode not in OBS_MODES:
            raise ValueError(f"{self.id}: obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"{self.id}: render_mode must be None or 'rgb_array', got {render_mode!r}")
        for name, value in (("max_episode_steps", max_episode_steps), ("image_size", image_size)):
            positive_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0
            if not positive_int and not (value is None and name == "max_episode_steps"):
                raise ValueError(f"{self.id}: {name} must be a positive integer, got {value!r}")
        if success_key is not None and not isinstance(success_key, str):
            raise ValueError(f"{self.id}: success_key must be an info key (a string), got {success_key!r}")
        self.obs_mode = obs_mode
        self.render_mode = render_mode
        self.image_size = int(image_size)
        self.success_key = success_key
        self._task_description = None if task_description is None else str(task_description)
        options = {"image_size": image_size, "task_description": task_description, "success_key": success_key}
        if self.env_class is not None:
            self.env = self._make_class(self.env_class, max_episode_steps, make_kwargs, options)
        else:
            self.env = self._make(self.id, max_episode_steps, make_kwargs)
        try:
            self._setup_action_space(self.env.action_space)
            self._setup_observation_space(self.env.observation_space)
            self._check_render_support()
        except Exception:
            self.env.close()
            raise
        self.max_episode_steps = self.env.spec.max_episode_steps if self.env.spec is not None else max_episode_steps
        self.metadata = {**self.metadata, "render_fps": self.env.metadata.get("render_fps", 30)}
        self._closed = False

    # -- construction ------------------------------------------------------------------------

    def _wants_frames(self) -> bool:
        return "rgb" in self.obs_mode or self.render_mode == "rgb_array"

    def _make(self, id: str, max_episode_steps: int | None, make_kwargs: dict[str, Any]) -> gym.Env:  # noqa: A002
        kwargs = dict(make_kwargs)
        if self._wants_frames():
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

    def _make_class(self, cls: type[gym.Env], max_episode_steps: int | None, make_kwargs: dict[str, Any],
                    options: dict[str, Any]) -> gym.Env:
        params = constructor_parameters(cls)
        self._takes_render_mode = takes_any_keyword(params) or "render_mode" in (params or {})
        kwargs = dict(make_kwargs)
        kwargs |= {k: v for k, v in options.items() if params is not None and k in params and v is not None}
        if self._wants_frames() and self._takes_render_mode:
            kwargs["render_mode"] = "rgb_array"
        if max_episode_steps is not None and params is not None and "max_episode_steps" in params:
            kwargs["max_episode_steps"] = max_episode_steps
        env = cls(**kwargs)
        return env if max_episode_steps is None else TimeLimit(env, max_episode_steps)

    def _check_render_support(self) -> None:
        from_render = self.render_mode == "rgb_array" or (MAIN_IMAGES in self.observation_space.spaces
                                                          and not self._image_sources)
        if not from_render:
            return
        modes = self.env.metadata.get("render_modes") or []
        if self.env_class is not None:
            if self._takes_render_mode or "rgb_array" in modes:
                return  # render() is tried; a frame that is not [H, W, 3] fails with the fix
            fix = ("give its constructor a render_mode parameter and return a uint8 [H, W, 3] frame from render() "
                   "when render_mode='rgb_array' (and list 'rgb_array' in metadata['render_modes'])")
        elif "rgb_array" in modes:
            return
        else:
            fix = "use obs_mode='state' and no videos, or an env that renders rgb_array frames"
        raise PluginError(f"{self.id}: obs_mode={self.obs_mode!r} / render_mode={self.render_mode!r} need frames "
                         f"from render(), but the env renders only {modes}; fix: {fix}")

    def _setup_action_space(self, space: gym.spaces.Space) -> None:
        if not isinstance(space, spaces.Box):
            raise PluginError(f"gymnasium env {self.id!r} has a {type(space).__name__} action space ({space}); "
                            f"embodied policies emit continuous actions, so only Box action spaces are supported. "
                            f"Fix: give the env a gymnasium.spaces.Box action space (for a discrete choice, e.g. a "
                            f"Box of one score per choice and step() taking the argmax)")
        if not np.issubdtype(space.dtype, np.floating) or not (np.isfinite(space.low).all()
                                                                and np.isfinite(space.high).all()):
            raise PluginError(f"gymnasium env {self.id!r}: its action space {space} must be a float Box with finite "
                            f"bounds (policies squash or clip to them). Fix: declare low/high and a float dtype")
        self._env_action_space = space
        self.action_space = spaces.Box(
            low=space.low.reshape(-1).astype(np.float32), high=space.high.reshape(-1).astype(np.float32),
            dtype=np.float32,
        )

    def _setup_observation_space(self, space: gym.spaces.Space) -> None:
        parts = [(k, space[k]) for k in self._order_keys(space)] if isinstance(space, spaces.Dict) else [(None, space)]
        images = [(k, sub) for k, sub in parts if is_image_space(sub)]
        state_parts = [(k, sub) for k, sub in parts if not is_image_space(sub)]
        self._image_sources = self._map_images(images)  # our key -> Dict key (None: the whole observation)
        self._state_keys: list[str] | None = None
        self.state_slices: dict[str, slice] = {}  # where each key of a Dict observation sits in ``states``
        obs_spaces: dict[str, spaces.Space] = {}
        if "state" in self.obs_mode:
            if not state_parts:
                raise PluginError(f"gymnasium env {self.id!r}: its observations are images only ({space}), so there is "
                                 f"no state vector for obs_mode={self.obs_mode!r}. Fix: set env.obs_mode=rgb")
            start = 0
            for key, sub in state_parts:
                try:
                    dim = spaces.flatdim(sub)
                except (ValueError, NotImplementedError) as err:
                    where = f"observation key {key!r}" if key is not None else "observation"
                    raise PluginError(f"gymnasium env {self.id!r}: its {where} ({sub}) cannot be flattened "
                                      f"into a state vector: {err}") from err
                if key is not None:
                    self.state_slices[key] = slice(start, start + dim)
                start += dim
            self._state_keys = [k for k, _ in state_parts] if isinstance(space, spaces.Dict) else None
            obs_spaces[STATES] = spaces.Box(-np.inf, np.inf, shape=(start,), dtype=np.float32)
        if "rgb" in self.obs_mode:
            if self._image_sources:
                for ours, source in self._image_sources.items():
                    shape = (space if source is None else space[source]).shape
                    obs_spaces[ours] = spaces.Box(0, 255, shape=shape, dtype=np.uint8)
            else:
                size = self.image_size
                obs_spaces[MAIN_IMAGES] = spaces.Box(0, 255, shape=(size, size, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)

    def _map_images(self, images: list[tuple[str | None, spaces.Space]]) -> dict[str, str | None]:
        """Image entries onto ``main_images`` / ``wrist_images``: ours by name first, then in order."""
        keys = [k for k, _ in images]
        mapping = {k: k for k in keys if k in IMAGE_SLOTS}
        rest = [k for k in keys if k not in IMAGE_SLOTS]
        for slot in IMAGE_SLOTS:
            if slot not in mapping and rest:
                mapping[slot] = rest.pop(0)
        if rest:
            warnings.warn(f"gymnasium env {self.id!r}: image observations {rest} are dropped; embodied reads at "
                          f"most two cameras ({', '.join(f'{v} -> {k}' for k, v in mapping.items())})", stacklevel=3)
        return {slot: mapping[slot] for slot in IMAGE_SLOTS if slot in mapping}

    @staticmethod
    def _order_keys(space: spaces.Dict) -> list[str]:
        keys = list(space.spaces)
        return [k for k in GOAL_KEYS if k in keys] + [k for k in keys if k not in GOAL_KEYS]

    # -- gymnasium API -----------------------------------------------------------------------

    @property
    def task_description(self) -> str:
        """The option's string, else the env's own ``task_description`` (called if callable), else ""."""
        if self._task_description is not None:
            return self._task_description
        value = getattr(self.env.unwrapped, "task_description", None)
        if callable(value):
            value = value()
        return "" if value is None else str(value)

    @task_description.setter
    def task_description(self, value: str | None) -> None:
        self._task_description = None if value is None else str(value)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._obs(obs), self._info(info, on_step=False)

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        space = self._env_action_space
        action = np.asarray(action, dtype=np.float32).reshape(self.action_space.shape)
        action = np.clip(action, self.action_space.low, self.action_space.high)
        obs, reward, terminated, truncated, info = self.env.step(action.reshape(space.shape).astype(space.dtype))
        return self._obs(obs), float(reward), bool(terminated), bool(truncated), self._info(info, on_step=True)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The env's frame (uint8 [H, W, 3]) when made with ``render_mode="rgb_array"``, else None."""
        if self.render_mode != "rgb_array":
            return None
        return self._postprocess_frame(self._frame(self.env.render()))

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
            if self._image_sources:
                for ours, source in self._image_sources.items():
                    out[ours] = np.array(obs if source is None else obs[source], dtype=np.uint8, copy=True)
            else:
                out[MAIN_IMAGES] = self._image(self.env.render())
        return out

    def _frame(self, frame: Any) -> np.ndarray:
        if frame is None:
            raise ValueError(f"{self.id}: render() returned None, but frames are needed (obs_mode={self.obs_mode!r}, "
                             f"render_mode={self.render_mode!r}); fix: return a uint8 [H, W, 3] array from render() "
                             f"when the env is made with render_mode='rgb_array'")
        return np.asarray(frame, dtype=np.uint8)

    def _image(self, frame: Any) -> np.ndarray:
        frame = self._postprocess_frame(self._frame(frame))
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

    def _info(self, info: dict[str, Any], on_step: bool) -> dict[str, Any]:
        key = self.success_key
        if key is None:
            success = info.get("is_success", info.get("success", False))
        elif key in info:
            success = info[key]
        elif on_step:
            raise ValueError(f"{self.id}: step() returned an info without {key!r} (env.kwargs.success_key); its keys "
                           f"are {sorted(info)}. Fix: name the key that marks success, or put it in every step's info")
        else:
            success = False
        return {**info, "success": bool(np.asarray(success).any())}

"""Turn an ``EnvConfig`` into env constructors, checking the constructor's arguments up front.

``ENVS.resolve`` decides how an ``env.id`` is built (``embodied.envs.adapters.gymnasium_env``'s docstring
has the rule): a ``BatchedEnv`` class directly; a class written to embodied's constructor
convention (it takes ``obs_mode`` and ``max_episode_steps``) once per env, its spaces checked
when built; a plain ``gymnasium.Env`` class or a gymnasium id through the ``GymnasiumEnv``
adapter. Either way ``env.kwargs`` is checked against the constructor's signature (names, and
values against simple annotations: ``int``, ``float``, ``str``, ``bool``, ``Literal``, unions,
containers) before any worker starts, naming the field path.
"""

from __future__ import annotations

import collections.abc
import inspect
import os
import sys
import time
import types
import typing
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import ConfigError, EnvConfig
from embodied.core.registry import ENVS, PluginError
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, footprint_of
from embodied.envs.adapters.gymnasium_env import ADAPTER_OPTIONS, GymnasiumEnv, adapted_target, describe
from embodied.envs.batched import BatchedEnv, is_batched
from embodied.envs.chunked import ChunkedVectorEnv
from embodied.policy.config import PolicySpec

KNOWN_KEYS: tuple[str, ...] = (STATES, MAIN_IMAGES, WRIST_IMAGES)
DEFAULT_EPISODE_STEPS = 50  # the episode cap of an env that declares none, when the config sets none either
MAX_BACKOFF_S = 30.0  # the longest wait between two tries of an env constructor


def make_vector_env(cfg: EnvConfig, num_envs: int, section: str = "env", render_mode: str | None = None,
                    name: str | None = None, first_index: int = 0) -> BatchedEnv:
    """``num_envs`` envs of ``cfg.id`` behind the chunk-step contract.

    An env class that offers a batched twin for ``cfg.obs_mode`` (``batched_twin(obs_mode)``, the built-in
    tasks for ``state``) is built as that twin unless ``env.vectorization`` is ``per_env``.
    A ``BatchedEnv`` implementation (class attribute ``batched = True``) is built directly;
    any other entry point is a gymnasium env constructor, one per env, wrapped in a
    ``ChunkedVectorEnv``: called with ``obs_mode``, ``max_episode_steps`` (and ``render_mode``
    when asked) plus every key of ``env.kwargs``. A mismatch is reported with the field path
    before any env is built; an env of embodied's convention whose spaces are not embodied's is
    refused, naming its class and the fix, when it is built (a ``PluginError``, as are the adapter's
own refusals: raised as they are, not as a crash inside the env).

    A constructor that names ``env_index`` gets each env's index in the whole batch
    (``first_index + i``): a suite of several tasks spreads them over the batch without rebuilding.
    A class declaring a ``footprint`` (``embodied.core.types.EnvFootprint``) of 1 s or more to build has
    its envs built on threads, with a progress bar. A constructor that raises is tried again with
    backoff (``build_with_retries``: ``env.build_retries``, ``env.build_backoff_s``).
    """
    target = ENVS.resolve(cfg.id)
    kwargs = _call_kwargs(cfg, render_mode, target)
    twin = batched_twin(target, cfg)
    if twin is not None:
        _check_twin_signature(target, twin, kwargs, cfg, section)
        kwargs |= {"num_envs": num_envs, "auto_reset": cfg.auto_reset}
        return build_with_retries(partial(twin, **kwargs), cfg, section, f"{name or cfg.id} ({num_envs} envs)")
    if is_batched(target):
        kwargs |= {"num_envs": num_envs, "auto_reset": cfg.auto_reset}
        _check_signature(target, kwargs, cfg, section)
        return build_with_retries(partial(target, **kwargs), cfg, section, f"{name or cfg.id} ({num_envs} envs)")
    _check_signature(target, kwargs, cfg, section)
    indexed = takes_env_index(target)
    per_env = [kwargs | ({"env_index": first_index + i} if indexed else {}) for i in range(num_envs)]
    if adapted_target(target) is None and not (isinstance(target, type) and issubclass(target, GymnasiumEnv)):
        builds = [partial(_build_checked, target, k, cfg.id) for k in per_env]
    else:
        builds = [partial(target, **k) for k in per_env]
    fns = [partial(build_with_retries, b, cfg, section, f"{name or cfg.id} env {i}") for i, b in enumerate(builds)]
    footprint = footprint_of(target)
    heavy = footprint is not None and footprint.heavy
    try:
        return ChunkedVectorEnv(fns, auto_reset=cfg.auto_reset, name=name or cfg.id,
                                build_threads=min(num_envs, os.cpu_count() or 1) if heavy else 1, progress=heavy)
    except Exception as exc:
        if isinstance(exc.__cause__, PluginError):  # the framework's own finding, not a crash in the env's code
            raise exc.__cause__ from None
        raise


def build_with_retries(build: Callable[[], Any], cfg: EnvConfig, section: str, what: str) -> Any:
    """``build()``, tried again ``cfg.build_retries`` times when it raises, after ``cfg.build_backoff_s`` seconds,
    then twice as long each time (at most ``MAX_BACKOFF_S``): EGL or GL initialisation, a model compile or a file
    lock fail now and then, and pass on a second try. What no retry mends is raised at once: the framework's own
    refusals (``PluginError``, ``ConfigError``), a ``TypeError`` (arguments that do not fit) and an ``ImportError``
    (a package missing). A failure that persists is raised with a note saying how often it was tried."""
    delay = cfg.build_backoff_s
    for attempt in range(cfg.build_retries + 1):
        try:
            return build()
        except (PluginError, ConfigError, TypeError, ImportError):
            raise
        except Exception as exc:
            if attempt == cfg.build_retries:
                if attempt > 0:
                    exc.add_note(f"{what}: the constructor failed on all {attempt + 1} attempts ({section}."
                                 f"build_retries={cfg.build_retries}, {section}.build_backoff_s="
                                 f"{cfg.build_backoff_s:g}): not a transient failure")
                raise
            print(f"[env build] {what}: the constructor raised {type(exc).__name__}: {exc}; trying again in "
                  f"{delay:g} s ({attempt + 1}/{cfg.build_retries})", file=sys.stderr, flush=True)
            time.sleep(delay)
            delay = min(2 * delay, MAX_BACKOFF_S)
    raise AssertionError("unreachable")  # the loop returns or raises


def control_frequency(cfg: EnvConfig) -> float | None:
    """How many actions a second of simulated time the env of ``cfg`` applies, or None if it does not say.

    A class that declares it, as a classmethod ``control_frequency(**env.kwargs)`` (the built-in tasks: from
    their model's timestep and ``frame_skip``; LIBERO: 20), is asked, and nothing is built: a LIBERO env takes
    seconds and a GB to build. Otherwise the rate is the env's ``metadata["render_fps"]``, which gymnasium's
    MuJoCo envs set to 1 / (timestep x frame_skip) and adapters copy from the env they wrap; it can depend on
    ``env.kwargs``, so one env is built (and closed) to read it.
    """
    import dataclasses

    target = ENVS.resolve(cfg.id)
    declared = getattr(target, "control_frequency", None) if isinstance(target, type) else None
    if callable(declared):
        rate = declared(**cfg.kwargs)
        return float(rate) if rate else None
    venv = make_vector_env(dataclasses.replace(cfg, num_envs=1), 1)
    try:
        envs = getattr(venv, "envs", None)
        metadata = envs[0].unwrapped.metadata if envs else getattr(venv, "metadata", None)
        fps = (metadata or {}).get("render_fps")
        return float(fps) if fps else None
    finally:
        venv.close()


def check_env_config(cfg: EnvConfig, section: str = "env", render_mode: str | None = None) -> None:
    """Resolve ``cfg.id`` and check its constructor accepts the config's arguments, building nothing.

    The runner calls this before any worker starts or any run directory is made, so a
    misspelt ``env.kwargs`` key, a value of the wrong type or a class that is not a gymnasium env
    fails in the driver with its field path.
    """
    try:
        target = ENVS.resolve(cfg.id)
    except (ImportError, PluginError) as exc:
        raise ConfigError(f"{section}.id: {exc}") from None
    kwargs = _call_kwargs(cfg, render_mode, target)
    twin = batched_twin(target, cfg)
    if twin is not None:
        _check_twin_signature(target, twin, kwargs, cfg, section)
        return
    if is_batched(target):
        kwargs |= {"num_envs": 1, "auto_reset": cfg.auto_reset}
    _check_signature(target, kwargs, cfg, section)


def batched_twin(target: Any, cfg: EnvConfig) -> type | None:
    """The ``BatchedEnv`` class that steps ``target``'s envs natively for ``cfg``, or None (one env per env).

    An env class offers one through a ``batched_twin(obs_mode)`` classmethod (the built-in tasks do for
    ``state``, and answer None for ``rgb``); ``vectorization: per_env`` declines it (the eval envs' default:
    ``EvalEnvConfig.vectorization``).
    """
    offer = getattr(target, "batched_twin", None) if isinstance(target, type) and not is_batched(target) else None
    if cfg.vectorization != "native" or not callable(offer):
        return None
    return offer(cfg.obs_mode)


def _check_twin_signature(target: Any, twin: type, kwargs: dict, cfg: EnvConfig, section: str) -> None:
    """``env.kwargs`` of a twin: its own options (e.g. ``nthread``) against it, the task's against ``target``."""
    twin_params = inspect.signature(twin).parameters
    task_params = inspect.signature(target).parameters
    own = [k for k, p in twin_params.items() if k not in task_params and p.kind is not inspect.Parameter.VAR_KEYWORD]
    _check_types(twin, twin_params, cfg, section, only={k: v for k, v in cfg.kwargs.items() if k in own})
    _check_signature(target, {k: v for k, v in kwargs.items() if k not in own}, cfg, section)


def takes_env_index(target: Any) -> bool:
    """Whether an env constructor names ``env_index`` (its index in the batch, passed by the factory)."""
    if not isinstance(target, type) or is_batched(target):
        return False
    try:
        return "env_index" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def episode_steps(cfg: EnvConfig, target: Any = None) -> int:
    """The episode cap the envs of ``cfg`` run with, in env steps: ``max_episode_steps`` when the config sets it,
    else the env's own (``declared_episode_steps`` of ``target``, ``cfg.id``'s entry point by default), else
    ``DEFAULT_EPISODE_STEPS``. Every env of ``cfg`` is built with this value, and whatever sizes chunks to
    whole episodes (eval rounds, collect, GRPO's check) reads it."""
    if cfg.max_episode_steps is not None:
        return cfg.max_episode_steps
    return declared_episode_steps(ENVS.resolve(cfg.id) if target is None else target) or DEFAULT_EPISODE_STEPS


def declared_episode_steps(target: Any) -> int | None:
    """The cap an env declares, or None: its class's ``default_max_episode_steps()`` (LIBERO: the suite's
    published cap), else its constructor's ``max_episode_steps`` default when a positive int (the built-in
    tasks, an adapter such as Fetch's), else a gymnasium id's registered ``max_episode_steps``."""
    declared = getattr(target, "default_max_episode_steps", None) if isinstance(target, type) else None
    if callable(declared):
        return int(declared())
    wrapped = adapted_target(target)
    if isinstance(wrapped, str):
        try:
            return gym.spec(wrapped).max_episode_steps
        except gym.error.Error:
            return None  # an id gymnasium does not know: gymnasium.make names it when the env is built
    params = _parameters(target) or {}
    default = getattr(params.get("max_episode_steps"), "default", None)
    positive = isinstance(default, int) and not isinstance(default, bool) and default > 0
    return default if positive else None


def _call_kwargs(cfg: EnvConfig, render_mode: str | None, target: Any) -> dict[str, Any]:
    if "env_index" in cfg.kwargs:
        raise ConfigError("env.kwargs.env_index: set by the env factory (each env's index in the batch), not by the "
                          "config; remove it")
    kwargs = dict(obs_mode=cfg.obs_mode, max_episode_steps=episode_steps(cfg, target), **cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return kwargs


# -- constructor arguments ----------------------------------------------------------------------


def _check_signature(target: Callable, kwargs: dict, cfg: EnvConfig, section: str) -> None:
    wrapped = adapted_target(target)
    if wrapped is not None:
        _check_adapted(wrapped, cfg, section)
        return
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return  # builtins and C extensions: let the call itself fail
    _check_types(target, params, cfg, section)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        where = [f"{section}.kwargs.{k}" if k in cfg.kwargs else f"{section}.{k}" for k in unknown]
        options = [k for k in unknown if k in ADAPTER_OPTIONS]
        note = (f" ({', '.join(options)}: options of the gymnasium adapter, which a class following embodied's "
                f"constructor convention does not go through; such a class reports info['success'] and its "
                f"task_description itself)") if options else ""
        raise ConfigError(f"{', '.join(where)}: env {cfg.id!r} ({describe(target)}) "
                          f"does not accept {unknown}; it takes {list(params)}{note}")


def _check_adapted(wrapped: str | type, cfg: EnvConfig, section: str) -> None:
    """``env.kwargs`` of a plain gymnasium class or id: the adapter's options plus its constructor's arguments."""
    creator = wrapped if isinstance(wrapped, type) else _gymnasium_creator(wrapped)
    params = _parameters(creator) if creator is not None else None
    adapter_params = inspect.signature(GymnasiumEnv).parameters
    options = {k: v for k, v in cfg.kwargs.items() if k in ADAPTER_OPTIONS}
    _check_types(GymnasiumEnv, adapter_params, cfg, section, only=options)
    if params is None:
        return
    passed = {k: v for k, v in cfg.kwargs.items() if k not in ADAPTER_OPTIONS or k in params}
    _check_types(creator, params, cfg, section, only=passed)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    make_own = [] if isinstance(wrapped, type) else [k for k in inspect.signature(gym.make).parameters if k != "id"]
    unknown = [k for k in passed if k not in params and k not in make_own]
    if unknown:
        what = describe(creator)
        raise ConfigError(
            f"{', '.join(f'{section}.kwargs.{k}' for k in unknown)}: env {cfg.id!r} ({what}) does not accept "
            f"{unknown}; its constructor takes {[p for p in params if p != 'self']}, and the gymnasium adapter "
            f"takes {list(ADAPTER_OPTIONS)}")


def _gymnasium_creator(env_id: str) -> Callable | None:
    """The entry point gymnasium would call for ``env_id``, or None when it cannot be loaded here."""
    try:
        from gymnasium.envs.registration import load_env_creator

        entry = gym.spec(env_id).entry_point
        return load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # noqa: BLE001 - the check is a courtesy; gymnasium.make reports the real error
        return None


def _parameters(fn: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def _check_types(target: Callable, params: typing.Mapping[str, inspect.Parameter], cfg: EnvConfig, section: str,
                 only: dict[str, Any] | None = None) -> None:
    """Values of ``env.kwargs`` (or ``only``) against the constructor's annotations, where they are simple."""
    values = cfg.kwargs if only is None else only
    hints = _hints(target)
    for key, value in values.items():
        param = params.get(key)
        if param is None:
            continue
        hint = hints.get(key, param.annotation)
        if hint is inspect.Parameter.empty or isinstance(hint, str) or _matches(value, hint):
            continue
        raise ConfigError(
            f"{section}.kwargs.{key}: env {cfg.id!r} ({describe(target)}) takes {key}: {_type_name(hint)}, got "
            f"{type(value).__name__} {value!r}. Fix: give a {_type_name(hint)} (in YAML, numbers and booleans "
            f"are written without quotes)")


def _hints(target: Callable) -> dict[str, Any]:
    fn = target.__init__ if isinstance(target, type) else target
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations are not checked
        return {}


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` (from YAML) fits ``hint``; True for anything this check does not understand."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    container = origin or hint
    if container in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        item = args[0] if args and (container is not tuple or len(args) == 2 and args[1] is Ellipsis) else None
        return item is None or all(_matches(v, item) for v in value)
    if container in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    return True  # classes, arrays, callables...: not judged here


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


# -- spaces of an env written to embodied's convention -----------------------------------------


def _build_checked(target: Callable, kwargs: dict, env_id: str) -> gym.Env:
    env = target(**kwargs)
    try:
        check_convention_spaces(env, f"env {env_id!r} ({describe(target)})")
    except Exception:
        if callable(getattr(env, "close", None)):  # a class that is not a gymnasium env may have none
            env.close()
        raise
    return env


def check_convention_spaces(env: gym.Env, where: str) -> None:
    """An env built by the fast path must already speak embodied's observation and action contract."""
    conv = "follows embodied's constructor convention (it takes obs_mode and max_episode_steps), so"
    plain = ("or take obs_mode and max_episode_steps out of its constructor: a plain gymnasium class goes "
             "through the gymnasium adapter, which maps Box or Dict observations onto these keys and converts dtypes")
    obs_space, act = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Dict):
        raise PluginError(f"{where} {conv} its observation_space must be a gymnasium.spaces.Dict with keys among "
                        f"{list(KNOWN_KEYS)}; got {obs_space}. Fix: return {{'states': float32 [S]}} (and/or "
                        f"'main_images', 'wrist_images': uint8 [H, W, 3]), {plain}")
    unknown = [k for k in obs_space.spaces if k not in KNOWN_KEYS]
    if unknown:
        raise PluginError(f"{where} {conv} its observation keys must be among {list(KNOWN_KEYS)}; got {unknown}. "
                        f"Fix: rename them (states: float32 [S]; main_images, wrist_images: uint8 [H, W, 3]), {plain}")
    states = obs_space.spaces.get(STATES)
    if states is not None and not (isinstance(states, gym.spaces.Box) and states.dtype == np.float32
                                   and len(states.shape) == 1):
        raise PluginError(f"{where} {conv} 'states' must be a 1-D float32 Box; got {states}. Fix: declare "
                        f"Box(..., shape=(S,), dtype=np.float32) and return float32 arrays, {plain}")
    for key in (MAIN_IMAGES, WRIST_IMAGES):
        image = obs_space.spaces.get(key)
        if image is not None and not (isinstance(image, gym.spaces.Box) and image.dtype == np.uint8
                                      and len(image.shape) == 3 and image.shape[-1] == 3):
            raise PluginError(f"{where} {conv} {key!r} must be a uint8 Box of shape [H, W, 3]; got {image}. Fix: "
                            f"declare Box(0, 255, (H, W, 3), np.uint8) and return uint8 RGB frames")
    if not (isinstance(act, gym.spaces.Box) and len(act.shape) == 1):
        raise PluginError(f"{where} has a {type(act).__name__} action space ({act}); embodied policies emit "
                        f"continuous actions. Fix: use a 1-D gymnasium.spaces.Box of float32 actions")


def env_spec(cfg: EnvConfig) -> PolicySpec:
    """The spec of ``cfg``'s env from one env built here (what a run checks demonstrations against before any
    worker starts)."""
    venv = make_vector_env(cfg, 1)
    try:
        return policy_spec(venv.single_observation_space, venv.single_action_space)
    finally:
        venv.close()


def policy_spec(observation_space: gym.spaces.Space, action_space: gym.spaces.Box) -> PolicySpec:
    """What a policy needs to know about an env's spaces."""
    spaces = observation_space.spaces if isinstance(observation_space, gym.spaces.Dict) else {}
    states = spaces.get(STATES)
    images, wrist = spaces.get(MAIN_IMAGES), spaces.get(WRIST_IMAGES)
    return PolicySpec(
        state_dim=int(np.prod(states.shape)) if states is not None else 0,
        image_shape=tuple(images.shape) if images is not None else None,
        action_dim=int(action_space.shape[0]),
        action_low=tuple(float(x) for x in action_space.low),
        action_high=tuple(float(x) for x in action_space.high),
        wrist_image_shape=tuple(wrist.shape) if wrist is not None else None,
    )

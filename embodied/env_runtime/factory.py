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

import dataclasses
import inspect
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import ConfigError, EnvConfig
from embodied.core.registry import ENVS, PluginError
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, footprint_of
from embodied.env_runtime.mixture import ConcatBatchedEnv, check_same_spaces, member_slices
from embodied.env_runtime.signature import check_signature, check_twin_signature, parameters
from embodied.envs.adapters.gymnasium_env import GymnasiumEnv, adapted_target, describe
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
    if len(cfg.members()) > 1:
        return _make_mixture(cfg, num_envs, section, render_mode, name or f"{section} mixture", first_index)
    built = _native_or_per_env(cfg, num_envs, section, render_mode, name, first_index)
    if not isinstance(built, _PerEnv):
        return built
    return _chunked(built.fns, cfg, name or cfg.id, built.heavy)


@dataclass
class _PerEnv:
    """The constructors of envs built one by one (then wrapped in a ``ChunkedVectorEnv``)."""

    fns: list[Callable[[], Any]]
    heavy: bool  # built on threads, with a progress bar


def _native_or_per_env(cfg: EnvConfig, num_envs: int, section: str, render_mode: str | None, name: str | None,
                       first_index: int) -> BatchedEnv | _PerEnv:
    """A natively batched env (a twin or a ``BatchedEnv`` class), built; else each env's constructor, not called."""
    target = ENVS.resolve(cfg.id)
    kwargs = _call_kwargs(cfg, render_mode, target)
    twin = batched_twin(target, cfg)
    if twin is not None:
        check_twin_signature(target, twin, kwargs, cfg, section)
        kwargs |= {"num_envs": num_envs, "auto_reset": cfg.auto_reset}
        return build_with_retries(partial(twin, **kwargs), cfg, section, f"{name or cfg.id} ({num_envs} envs)")
    if is_batched(target):
        kwargs |= {"num_envs": num_envs, "auto_reset": cfg.auto_reset}
        check_signature(target, kwargs, cfg, section)
        return build_with_retries(partial(target, **kwargs), cfg, section, f"{name or cfg.id} ({num_envs} envs)")
    check_signature(target, kwargs, cfg, section)
    indexed = takes_env_index(target)
    per_env = [kwargs | ({"env_index": first_index + i} if indexed else {}) for i in range(num_envs)]
    if adapted_target(target) is None and not (isinstance(target, type) and issubclass(target, GymnasiumEnv)):
        builds = [partial(_build_checked, target, k, cfg.id) for k in per_env]
    else:
        builds = [partial(target, **k) for k in per_env]
    fns = [partial(build_with_retries, b, cfg, section, f"{name or cfg.id} env {i}") for i, b in enumerate(builds)]
    footprint = footprint_of(target)
    return _PerEnv(fns, footprint is not None and footprint.heavy)


def _chunked(fns: list[Callable[[], Any]], cfg: EnvConfig, name: str, heavy: bool,
             env_ids: list[str] | None = None) -> ChunkedVectorEnv:
    try:
        return ChunkedVectorEnv(fns, auto_reset=cfg.auto_reset, name=name, env_ids=env_ids,
                                build_threads=min(len(fns), os.cpu_count() or 1) if heavy else 1, progress=heavy)
    except Exception as exc:
        if isinstance(exc.__cause__, PluginError):  # the framework's own finding, not a crash in the env's code
            raise exc.__cause__ from None
        raise


def _make_mixture(cfg: EnvConfig, num_envs: int, section: str, render_mode: str | None, name: str,
                  first_index: int) -> BatchedEnv:
    """The members of envs ``first_index ..`` of a mixture's batch (``embodied.env_runtime.mixture``): one
    ``ChunkedVectorEnv`` over every member's envs when each is built env by env (so expert labels, videos and
    snapshots work as for one env id), else the members' batched envs side by side (``ConcatBatchedEnv``)."""
    parts = member_slices(cfg, first_index, num_envs)
    built = [_native_or_per_env(cfg.member(p.env_id), p.num_envs, section, render_mode, f"{name}: {p.env_id}",
                                p.first_index) for p in parts]
    if all(isinstance(b, _PerEnv) for b in built):
        ids = [p.env_id for p in parts for _ in range(p.num_envs)]
        venv = _chunked([f for b in built for f in b.fns], cfg, name, any(b.heavy for b in built), ids)
        try:
            check_same_spaces(ids, [e.observation_space for e in venv.envs], [e.action_space for e in venv.envs],
                              f"{section}.id")
        except ValueError:
            venv.close()
            raise
        return venv
    parts_built = [b if not isinstance(b, _PerEnv) else _chunked(b.fns, cfg.member(p.env_id), f"{name}: {p.env_id}",
                                                                 b.heavy, [p.env_id] * p.num_envs)
                   for p, b in zip(parts, built)]
    return ConcatBatchedEnv(parts_built, [p.env_id for p in parts], name)


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
    cfg = cfg.first_member()  # a mixture's members act at one rate: one policy's actions drive them all
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
    fails in the driver with its field path. A mixture (``env.id`` a list or a named set) has each member checked,
    its weights, and its members' spaces against each other (``check_mixture``).
    """
    if not isinstance(cfg.id, str) or len(cfg.members()) > 1:
        check_mixture(cfg, section, render_mode)
        return
    if cfg.weights is not None:
        raise ConfigError(f"{section}.weights: shares of a mixture's members, but {section}.id {cfg.id!r} is one env")
    try:
        target = ENVS.resolve(cfg.id)
    except (ImportError, PluginError) as exc:
        raise ConfigError(f"{section}.id: {exc}") from None
    kwargs = _call_kwargs(cfg, render_mode, target)
    twin = batched_twin(target, cfg)
    if twin is not None:
        check_twin_signature(target, twin, kwargs, cfg, section)
        return
    if is_batched(target):
        kwargs |= {"num_envs": 1, "auto_reset": cfg.auto_reset}
    check_signature(target, kwargs, cfg, section)


def check_mixture(cfg: EnvConfig, section: str, render_mode: str | None = None) -> None:
    """A mixture's config before any worker starts: known members, one weight each, an env for each member, each
    member's own config, and the members' spaces alike (``ConfigError`` naming the field, the members and the key).

    Spaces are read from each member's class where it tells them without building (``observation_shapes`` and an
    ``action_space`` class attribute: LIBERO, whose envs take seconds and a GB each), else from one env built here."""
    try:
        ids = cfg.members()
    except (KeyError, ImportError) as exc:
        raise ConfigError(f"{section}.id: {exc}") from None
    if not ids:
        raise ConfigError(f"{section}.id: an empty mixture; give one env id or several")
    if cfg.weights is not None and len(cfg.weights) != len(ids):
        raise ConfigError(f"{section}.weights: {len(cfg.weights)} weights for the {len(ids)} members "
                          f"({', '.join(ids)})")
    try:
        cfg.member_counts()
    except ValueError as exc:
        raise ConfigError(f"{section}.num_envs / {section}.weights: {exc} ({', '.join(ids)})") from None
    for env_id in ids:
        check_env_config(cfg.member(env_id), section, render_mode)
    spaces = [_declared_spaces(cfg.member(env_id)) for env_id in ids]
    try:
        check_same_spaces(ids, [o for o, _ in spaces], [a for _, a in spaces], f"{section}.id")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _declared_spaces(cfg: EnvConfig) -> tuple[gym.spaces.Dict, gym.spaces.Space]:
    """The observation and action spaces of ``cfg``'s env: from its class when it declares them (shapes, as
    ``observation_shapes`` gives them, with the dtype the contract fixes), else from one env built and closed."""
    target = ENVS.resolve(cfg.id)
    shapes_of, action = getattr(target, "observation_shapes", None), getattr(target, "action_space", None)
    if callable(shapes_of) and isinstance(action, gym.spaces.Box):
        shapes = shapes_of(obs_mode=cfg.obs_mode, **cfg.kwargs)
        return gym.spaces.Dict({k: gym.spaces.Box(-np.inf, np.inf, tuple(v)) for k, v in shapes.items()}), action
    venv = make_vector_env(dataclasses.replace(cfg, num_envs=1, auto_reset=False), 1)
    try:
        return venv.single_observation_space, venv.single_action_space
    finally:
        venv.close()


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
    whole episodes (eval rounds, collect, GRPO's check) reads it. A mixture: the longest of its members' caps."""
    if len(cfg.members()) > 1:
        return max(episode_steps(cfg.member(env_id)) for env_id in cfg.members())
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
    params = parameters(target) or {}
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
    worker starts); a mixture's members share it (``check_mixture``), so its first member's."""
    venv = make_vector_env(cfg.first_member(), 1)
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

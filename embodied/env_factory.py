"""Turn an ``EnvConfig`` into env constructors, checking the constructor's arguments up front."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial

import gymnasium as gym
import numpy as np

from embodied.config import ConfigError, EnvConfig
from embodied.policy import PolicySpec
from embodied.registry import ENVS
from embodied.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from envs.batched import BatchedEnv, is_batched
from envs.chunked import ChunkedVectorEnv


def make_vector_env(cfg: EnvConfig, num_envs: int, section: str = "env", render_mode: str | None = None,
                    name: str | None = None) -> BatchedEnv:
    """``num_envs`` envs of ``cfg.id`` behind the chunk-step contract.

    A ``BatchedEnv`` implementation (class attribute ``batched = True``) is built directly;
    any other entry point is a gymnasium env constructor, one per env, wrapped in a
    ``ChunkedVectorEnv``. The constructor must accept ``obs_mode``, ``max_episode_steps`` (and
    ``render_mode`` when asked) plus every key of ``env.kwargs``; a mismatch is reported with the
    field path before any env is built.
    """
    target = ENVS.resolve(cfg.id)
    kwargs = dict(obs_mode=cfg.obs_mode, max_episode_steps=cfg.max_episode_steps, **cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if is_batched(target):
        kwargs |= {"num_envs": num_envs, "auto_reset": cfg.auto_reset}
        _check_signature(target, kwargs, cfg, section)
        return target(**kwargs)
    _check_signature(target, kwargs, cfg, section)
    fns = [partial(target, **kwargs) for _ in range(num_envs)]
    return ChunkedVectorEnv(fns, auto_reset=cfg.auto_reset, name=name or cfg.id)


def check_env_config(cfg: EnvConfig, section: str = "env", render_mode: str | None = None) -> None:
    """Resolve ``cfg.id`` and check its constructor accepts the config's arguments, building nothing.

    The runner calls this before any worker starts or any run directory is made, so a
    misspelt ``env.kwargs`` key fails in the driver with its field path.
    """
    try:
        target = ENVS.resolve(cfg.id)
    except ImportError as exc:
        raise ConfigError(f"{section}.id: {exc}") from None
    kwargs = dict(obs_mode=cfg.obs_mode, max_episode_steps=cfg.max_episode_steps, **cfg.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if is_batched(target):
        kwargs |= {"num_envs": 1, "auto_reset": cfg.auto_reset}
    _check_signature(target, kwargs, cfg, section)


def _check_signature(target: Callable, kwargs: dict, cfg: EnvConfig, section: str) -> None:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return  # builtins and C extensions: let the call itself fail
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        where = [f"{section}.kwargs.{k}" if k in cfg.kwargs else f"{section}.{k}" for k in unknown]
        raise ConfigError(f"{', '.join(where)}: env {cfg.id!r} ({target.__module__}.{target.__qualname__}) "
                          f"does not accept {unknown}; it takes {list(params)}")


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

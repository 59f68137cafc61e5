"""``env.kwargs`` against an env constructor's signature: names, and values against simple annotations (``int``,
``float``, ``str``, ``bool``, ``Literal``, unions, containers), checked before any env is built, each problem
naming its field path (``env.kwargs.task_ids``)."""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import ConfigError, EnvConfig
from embodied.envs.adapters.gymnasium_env import ADAPTER_OPTIONS, GymnasiumEnv, adapted_target, describe


def check_twin_signature(target: Any, twin: type, kwargs: dict, cfg: EnvConfig, section: str) -> None:
    """``env.kwargs`` of a twin: its own options (e.g. ``nthread``) against it, the task's against ``target``."""
    twin_params = inspect.signature(twin).parameters
    task_params = inspect.signature(target).parameters
    own = [k for k, p in twin_params.items() if k not in task_params and p.kind is not inspect.Parameter.VAR_KEYWORD]
    _check_types(twin, twin_params, cfg, section, only={k: v for k, v in cfg.kwargs.items() if k in own})
    check_signature(target, {k: v for k, v in kwargs.items() if k not in own}, cfg, section)


def check_signature(target: Callable, kwargs: dict, cfg: EnvConfig, section: str) -> None:
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
    params = parameters(creator) if creator is not None else None
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


def parameters(fn: Callable) -> dict[str, inspect.Parameter] | None:
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

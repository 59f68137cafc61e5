"""Loading an env for the checks: import, construct and reset it as the env workers would."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym

from embodied.config import EnvConfig
from embodied.core.registry import ENVS, PluginError, UnknownNameError
from embodied.env_runtime.check_env.diagnosis import CheckFailed, describe_target, known_failure, load_failure
from embodied.env_runtime.check_env.observations import kind_of
from embodied.env_runtime.factory import make_vector_env
from embodied.envs.batched import is_batched


def resolve_target(cfg: EnvConfig) -> Any:
    try:
        target = ENVS.resolve(cfg.id)
    except (UnknownNameError, ImportError, PluginError) as exc:
        raise load_failure(exc, cfg, None) from exc
    missing = [m for m in ("reset", "step") if not callable(getattr(target, m, None))]
    if isinstance(target, type) and not is_batched(target) and not issubclass(target, gym.Env) and missing:
        raise CheckFailed(f"{describe_target(target)} is not a gymnasium env: it subclasses neither gymnasium.Env "
                          f"nor BatchedEnv, and has no {' or '.join(f'{m}()' for m in missing)}",
                          "make it a gymnasium.Env subclass (observation_space, action_space, reset(seed=...) -> "
                          "(obs, info), step(action) -> (obs, reward, terminated, truncated, info)), or a BatchedEnv "
                          "(class attribute batched = True, see embodied/envs/batched.py)", stop=True)
    return target


def build_env(cfg: EnvConfig, target: Any, num_envs: int, render_mode: str | None = None, **changes: Any) -> Any:
    """The vector env the env workers would build (``make_vector_env``); errors that stop every check are named."""
    if not is_batched(target):  # a class with a batched twin is checked per env here, its twin on its own
        changes = {"vectorization": "per_env", **changes}
    cfg = dataclasses.replace(cfg, **changes) if changes else cfg
    try:
        return make_vector_env(cfg, num_envs, render_mode=render_mode, name=cfg.id)
    except Exception as exc:
        known = known_failure(exc, cfg, target)
        if known is None:
            raise
        raise known from exc


def reset_env(env: gym.Env, seed: int | None) -> tuple[Any, dict]:
    out = env.reset(seed=seed)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise CheckFailed(f"reset() returned {kind_of(out)}, not (obs, info)",
                          "return (obs, info) from reset() as gymnasium >= 0.26 does", stop=True)
    return out


class closing:
    """``contextlib.closing`` that tolerates envs without ``close``."""

    def __init__(self, thing: Any) -> None:
        self.thing = thing

    def __enter__(self) -> Any:
        return self.thing

    def __exit__(self, *exc: object) -> None:
        close = getattr(self.thing, "close", None)
        if callable(close):
            close()

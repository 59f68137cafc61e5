"""What ``embodied list envs`` shows: each registered env with its obs modes and action space.

Obs modes are found by constructing the env in each mode (construction validates ``obs_mode``
and renders nothing); an env whose module or extra is missing is listed as unavailable.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from embodied.core.registry import ENVS
from embodied.core.types import OBS_MODES, footprint_of
from embodied.envs.batched import is_batched


@dataclass
class EnvDescription:
    name: str
    entry_point: str
    obs_modes: list[str]
    action_space: str  # e.g. "Box(4) in [-1, 1]"
    error: str = ""  # why the env could not be described (e.g. an extra is not installed)


def describe_env(name: str) -> EnvDescription:
    """Construct ``name`` in every obs mode it accepts and summarise its action space.

    An env that declares a costly ``footprint`` (seconds to build, e.g. LIBERO) is described from its
    class instead: the modes its ``obs_mode`` annotation allows and its class-level ``action_space``, or why it
    cannot run here when its class says (``unavailable()``).
    """
    entry = str(ENVS.entry_point(name))
    try:
        target = ENVS.resolve(name)
    except Exception as exc:  # noqa: BLE001 - a missing extra or a broken plug-in: listed, not fatal
        return EnvDescription(name, entry, [], "", f"unavailable: {exc}")
    footprint = footprint_of(target)
    if footprint is not None and footprint.heavy and isinstance(target, type):
        return _describe_class(name, entry, target)
    modes, action = [], ""
    errors: list[str] = []
    for mode in OBS_MODES:
        try:
            env = target(obs_mode=mode, num_envs=1, auto_reset=True) if is_batched(target) else target(obs_mode=mode)
        except Exception as exc:  # noqa: BLE001 - a mode the env rejects is simply not listed
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        modes.append(mode)
        space = env.single_action_space if is_batched(target) else env.action_space
        action = action or _box(space)
        env.close()
    return EnvDescription(name, entry, modes, action, "" if modes else f"unavailable: {errors[0]}")


def _describe_class(name: str, entry: str, target: type) -> EnvDescription:
    """From the class alone; a class whose ``unavailable()`` gives a reason (files its package lacks) is listed so."""
    why = getattr(target, "unavailable", None)
    reason = why() if callable(why) else ""
    if reason:
        return EnvDescription(name, entry, [], "", f"unavailable: {reason}")
    hint = typing.get_type_hints(target.__init__).get("obs_mode")
    modes = [m for m in OBS_MODES if m in typing.get_args(hint)] if hint is not None else []
    space = getattr(target, "action_space", None)
    return EnvDescription(name, entry, modes, _box(space) if isinstance(space, gym.spaces.Space) else "")


def _box(space: object) -> str:
    low, high = np.asarray(getattr(space, "low", [])), np.asarray(getattr(space, "high", []))
    if low.size == 0:
        return str(space)
    lo, hi = (f"{low.min():g}", f"{high.max():g}") if low.size else ("?", "?")
    uniform = np.all(low == low.flat[0]) and np.all(high == high.flat[0])
    bounds = f"[{lo}, {hi}]" if uniform else f"[{lo}..{hi}] per dim"
    return f"Box({', '.join(map(str, getattr(space, 'shape', ())))}) in {bounds}"


def format_env_table(rows: list[EnvDescription]) -> str:
    """A fixed-width table: id, obs modes, action space, entry point (or why unavailable)."""
    width = max([22, *(len(r.name) for r in rows)])
    lines = [f"{'id':{width}s} {'obs modes':24s} {'actions':22s} entry point"]
    for r in rows:
        detail = r.error or r.entry_point
        lines.append(f"{r.name:{width}s} {' | '.join(r.obs_modes) or '-':24s} {r.action_space or '-':22s} {detail}")
    return "\n".join(lines)

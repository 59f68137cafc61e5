"""What ``embodied list envs`` shows: each registered env with its obs modes and action space.

Obs modes are found by constructing the env in each mode (construction validates ``obs_mode``
and renders nothing); an env whose module or extra is missing is listed as unavailable.
"""

from __future__ import annotations

import dataclasses
import re
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
    summary: str = ""  # the first sentence of its class's docstring

    @property
    def family(self) -> str:
        """Where the id comes from, by its entry point: a suite's adapter (``libero``, ``libero.pro`` ...), the
        built-in tasks, or a plug-in of the user's."""
        module = self.entry_point.partition(":")[0]
        for prefix, family in FAMILIES:
            if module.startswith(prefix):
                return family
        return "plug-ins (your packages)"


# Entry-point module prefixes and the family they list under, most specific first.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("embodied.envs.adapters.libero.pro", "LIBERO-PRO (perturbed LIBERO suites)"),
    ("embodied.envs.adapters.libero", "LIBERO"),
    ("embodied.envs.adapters.", "adapters of other suites"),
    ("embodied.envs.", "built-in MuJoCo tasks"),
)


def summary(obj: object, limit: int = 110) -> str:
    """The first sentence of ``obj``'s docstring, without reST marks ('' without one, or with the signature a
    dataclass gets in its place): what ``embodied list`` says of an entry."""
    obj = getattr(obj, "func", obj)  # a functools.partial of an adapter: the adapter's class
    doc = (getattr(obj, "__doc__", None) or "").strip()
    if not doc or doc.startswith(f"{getattr(obj, '__name__', '')}("):
        return ""
    paragraph = " ".join(line.strip() for line in doc.split("\n\n")[0].splitlines()).replace("``", "")
    # a sentence ends at a full stop before a capital, not at "et al." or "e.g."
    sentence = re.split(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z])", paragraph, maxsplit=1)[0].rstrip(".")
    return sentence if len(sentence) <= limit else sentence[:limit - 3].rstrip() + "..."


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
        return dataclasses.replace(_describe_class(name, entry, target), summary=summary(target))
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
    return EnvDescription(name, entry, modes, action, "" if modes else f"unavailable: {errors[0]}", summary(target))


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
    """Fixed-width tables, one a family: id, obs modes, action space, what the env is (or why it is unavailable)
    and its entry point."""
    width = max([22, *(len(r.name) for r in rows)])
    lines = []
    families = list(dict.fromkeys(r.family for r in sorted(rows, key=_family_order)))
    for family in families:
        lines += ["" if lines else "", f"== {family}", f"{'id':{width}s} {'obs modes':24s} {'actions':22s} about"]
        for r in (r for r in rows if r.family == family):
            detail = r.error or f"{r.summary}  ({r.entry_point})"
            lines.append(f"{r.name:{width}s} {' | '.join(r.obs_modes) or '-':24s} {r.action_space or '-':22s} {detail}")
    return "\n".join(lines).lstrip("\n")


def _family_order(row: EnvDescription) -> int:
    names = [family for _, family in FAMILIES][::-1]  # built-in first, LIBERO-PRO last, plug-ins after
    return names.index(row.family) if row.family in names else len(names)

"""Lazy ``"module:attr"`` registries for simulators and policies.

The engine never imports a simulator or a model by name: built-ins are declared as entry points
of the ``embodied.envs`` / ``embodied.policies`` groups in ``pyproject.toml`` (a user's package
can declare its own the same way), or registered at run time::

    from embodied.core.registry import ENVS
    ENVS.register("MyArm-v0", "my_pkg.my_env:MyArmEnv")

A config may also name an entry point directly (``env.id: my_pkg.my_env:MyArmEnv``). Nothing is
imported until ``resolve`` is called, so ``import embodied`` stays free of MuJoCo and transformers.

An env id known to neither but registered with gymnasium (``env.id: HalfCheetah-v5``) resolves to
the generic adapter ``embodied.envs.adapters.gymnasium_env:GymnasiumEnv`` bound to that id; gymnasium is
imported only on that fallback path. Every env that resolves is then handed to
``embodied.envs.adapters.gymnasium_env:plug_in``, which binds the same adapter to a plain ``gymnasium.Env``
class (one whose constructor does not follow embodied's ``obs_mode``/``max_episode_steps``
convention) and returns everything else as it is (its docstring has the rule).
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any


class UnknownNameError(KeyError):
    """A name that is neither registered nor a ``module:attr`` entry point."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def load_entry_point(entry_point: str) -> Any:
    """Import ``"package.module:attr"`` and return ``attr``, with an error that names the string."""
    module_name, sep, attr = entry_point.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ImportError(f"cannot import module {module_name!r} of entry point {entry_point!r}: {exc}") from exc
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r} (entry point {entry_point!r})") from exc
    return obj


class PluginError(TypeError):
    """An entry point that resolves to something the framework cannot build an env from (says the fix)."""


class GymnasiumFallback:
    """Ids registered with gymnasium (and not with embodied) resolve to the generic gymnasium adapter;
    plain gymnasium classes are bound to the same adapter (``adapt``)."""

    adapter = "embodied.envs.adapters.gymnasium_env:GymnasiumEnv"
    plug_in = "embodied.envs.adapters.gymnasium_env:plug_in"
    hint = "any id registered with gymnasium (gymnasium.envs.registry) works too"

    def adapt(self, target: Any, name: str) -> Any:
        """``target`` as the framework calls it: plain gymnasium classes get the adapter (may raise ``PluginError``)."""
        return load_entry_point(self.plug_in)(target, name)

    def lookup(self, name: str) -> Callable[..., Any] | None:
        """``GymnasiumEnv`` bound to ``name`` if gymnasium knows it, else None."""
        import gymnasium

        if name not in gymnasium.envs.registry:
            return None
        return functools.partial(load_entry_point(self.adapter), name)

    def names(self) -> list[str]:
        import gymnasium

        return list(gymnasium.envs.registry)


class Registry:
    """Names mapped to lazy entry points, seeded from one ``importlib.metadata`` group.

    ``fallback`` (optional) is asked about names that are neither registered nor ``module:attr``
    strings: its ``lookup(name)`` returns an object or None, ``names()`` feeds the close matches.
    """

    def __init__(self, kind: str, group: str, fallback: GymnasiumFallback | None = None) -> None:
        self.kind = kind
        self.group = group
        self.fallback = fallback
        self._entries: dict[str, str | Any] = {}
        self._discovered = False

    def _discover(self) -> None:
        if not self._discovered:
            self._discovered = True
            for ep in entry_points(group=self.group):
                self._entries.setdefault(ep.name, ep.value)

    def register(self, name: str, entry_point: str | Any, *, overwrite: bool = False) -> None:
        """Register ``name`` as a ``"module:attr"`` string (loaded lazily) or an object."""
        self._discover()
        if name in self._entries and not overwrite and self._entries[name] != entry_point:
            raise ValueError(f"{self.kind} {name!r} is already registered as {self._entries[name]!r}")
        self._entries[name] = entry_point

    def names(self, declared_order: bool = False) -> list[str]:
        """All registered names, sorted (``declared_order``: as the packages declare them, then as registered)."""
        self._discover()
        return list(self._entries) if declared_order else sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def entry_point(self, name: str) -> str | Any:
        """The registered entry point of ``name`` (raises ``UnknownNameError``)."""
        self._discover()
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            return name
        if self.fallback is not None and (target := self.fallback.lookup(name)) is not None:
            return target
        candidates = list(self._entries) + (self.fallback.names() if self.fallback is not None else [])
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        also = f"; {self.fallback.hint}" if self.fallback is not None else ""
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}{hint} Known: {', '.join(self.names()) or '(none)'}{also}. "
            f"Your own {self.kind} can be named as 'package.module:attr'."
        )

    def resolve(self, name: str) -> Any:
        """The object ``name`` stands for, importing its module on first use (envs: see ``GymnasiumFallback.adapt``)."""
        target = self.entry_point(name)
        obj = load_entry_point(target) if isinstance(target, str) else target
        return self.fallback.adapt(obj, name) if self.fallback is not None else obj


ENVS = Registry("env", "embodied.envs", fallback=GymnasiumFallback())
POLICIES = Registry("policy", "embodied.policies")
# Named lists of env ids (``libero-pro-object``) that ``embodied eval --suites`` and ``runner.extra_evals`` take.
ENV_SETS = Registry("env set", "embodied.env_sets")
ALGORITHMS = Registry("algorithm", "embodied.algorithms")
# Heads an algorithm puts on a policy's observation encoder as its actor (``AlgorithmConfig.policy_head``): each a
# callable (policy config, algorithm config) -> the trained policy's config.
POLICY_HEADS = Registry("policy head", "embodied.policy_heads")


def lazy_attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562) that imports ``package.<where[name]>`` when ``name`` is first
    used: the package re-exports its names without importing every module of it up front."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__


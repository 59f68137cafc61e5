"""Failure diagnosis: what an error that stops the checks means, and how to fix it.

An import error (the module not found from here, a dependency not installed, a wrong class name), a call
error (a constructor that does not fit ``env.kwargs``, a ``reset`` without ``seed=``), a config value the
env refuses, or a crash inside the env's own code, named by its class, file, line and traceback.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

import gymnasium as gym

import embodied
from embodied.config import ConfigError, EnvConfig
from embodied.core.registry import ENVS, PluginError, UnknownNameError
from embodied.core.types import EnvError
from embodied.envs.adapters.gymnasium_env import adapted_target
from embodied.envs.batched import is_batched


class CheckFailed(Exception):
    """A failed check: ``str(self)`` says what is wrong, ``fix`` how to mend it.

    ``warning``: the run works but its results degrade (reported, not failed). ``stop``: the
    checks after this one cannot run (they would all fail the same way).
    """

    def __init__(self, what: str, fix: str, *, warning: bool = False, stop: bool = False, tb: str = "") -> None:
        super().__init__(what)
        self.fix, self.warning, self.stop, self.tb = fix, warning, stop, tb


def known_failure(exc: BaseException, cfg: EnvConfig, target: Any) -> CheckFailed | None:
    """A stopping ``CheckFailed`` for an error that is not a crash inside the env's own code, else None."""
    if isinstance(exc, CheckFailed):
        return exc
    if isinstance(exc, (UnknownNameError, ImportError, PluginError, ConfigError)):
        return load_failure(exc, cfg, target)
    cause = _unwrap(exc)
    if isinstance(cause, TypeError) and not own_frames(cause) and _is_call_error(cause):
        return _call_failure(cause, target)
    if isinstance(cause, ValueError) and str(cause).startswith(("env.", "eval_env.")):
        # An env refusing a config value names the field (``env.kwargs.task_ids: ...``): a config error, not a crash.
        return CheckFailed(str(cause), "correct that field of the config (the message names it and what is valid)",
                           stop=True)
    return None


def load_failure(exc: BaseException, cfg: EnvConfig, target: Any) -> CheckFailed:
    if isinstance(exc, UnknownNameError):
        return CheckFailed(str(exc), "register the env (ENVS.register) or name it as 'package.module:Class'",
                           stop=True)
    if isinstance(exc, ImportError):
        return _import_failure(exc, cfg)
    what, fix = _split_fix(str(exc))
    if isinstance(exc, ConfigError):
        signature = f"its constructor is {_signature(target)}"
        return CheckFailed(what, f"{fix}; {signature}" if fix else f"make env.kwargs fit the constructor: {signature}",
                           stop=True)
    return CheckFailed(what, fix or "see the message", stop=True)


def _split_fix(message: str) -> tuple[str, str]:
    """A framework message 'what ... Fix: how' as (what, how); how is '' when the message has no fix."""
    found = re.search(r"[.;,]?\s*\b[Ff]ix:\s*", message)
    return (message[:found.start()], message[found.end():]) if found else (message, "")


def _import_failure(exc: ImportError, cfg: EnvConfig) -> CheckFailed:
    entry = ENVS.entry_point(cfg.id) if cfg.id in ENVS else cfg.id
    module = entry.partition(":")[0] if isinstance(entry, str) else ""
    missing = getattr(exc.__cause__, "name", None) or getattr(exc, "name", None)
    if isinstance(exc.__cause__, ModuleNotFoundError) and missing and (module + ".").startswith(missing + "."):
        top = module.split(".")[0]
        return CheckFailed(
            str(exc), f"python cannot find {missing!r} from {os.getcwd()}: run from the folder that holds {top}/, "
            f"add that folder to PYTHONPATH (PYTHONPATH=/path/to/project embodied ...), or install your project "
            f"into this environment (pip install -e /path/to/project)", stop=True)
    if isinstance(exc.__cause__, ModuleNotFoundError) and missing:
        return CheckFailed(f"{exc} (see the traceback above)",
                           f"{module} imports {missing!r}, which is not installed in {sys.prefix}: "
                           f"pip install {missing.split('.')[0]} (the package that provides it)", stop=True,
                           tb=_traceback_text(exc.__cause__))
    if "has no attribute" in str(exc):
        names = _env_classes(module)
        return CheckFailed(str(exc), f"check the name after ':' in {cfg.id!r}; {module} defines "
                           f"{names or 'no gymnasium.Env class'}", stop=True)
    own = own_frames(exc)
    return CheckFailed(str(exc) + (" (see the traceback above)" if own else ""),
                       "check the import path 'package.module:Class' and the imports of your module; PYTHONPATH, or "
                       "pip install -e your project", stop=True, tb=_traceback_text(exc) if own else "")


def _env_classes(module: str) -> list[str]:
    mod = sys.modules.get(module)
    return sorted(n for n, v in vars(mod).items() if isinstance(v, type) and v.__module__ == module
                  and (issubclass(v, gym.Env) or is_batched(v))) if mod else []


def _is_call_error(exc: TypeError) -> bool:
    return bool(re.search(r"required (positional|keyword-only) argument|unexpected keyword argument|"
                          r"positional arguments? but", str(exc)))


def _call_failure(exc: TypeError, target: Any) -> CheckFailed:
    if "seed" in str(exc) and "reset" in str(exc):
        return CheckFailed(f"reset() does not take seed=: {exc}", "define reset(self, *, seed=None, options=None) and "
                           "call super().reset(seed=seed) first", stop=True)
    return CheckFailed(f"the constructor cannot be called with the config's arguments: {exc}",
                       f"make env.kwargs fit the constructor: {_signature(target)}", stop=True)


# -- naming the user's code: its class, file and traceback ------------------------------------------

_ROOT = Path(embodied.__file__).resolve().parents[1]
_FRAMEWORK = [Path(embodied.__file__).resolve().parent, _ROOT / "envs" / "chunked.py", _ROOT / "envs" / "batched.py",
              _ROOT / "envs" / "adapters", Path(gym.__file__).resolve().parent]
_LIBRARY = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}


def describe_target(target: Any) -> str:
    """The user's class (or gymnasium id) behind an env entry point, with its file: ``pkg.mod.Class (pkg/mod.py)``."""
    inner = adapted_target(target)
    if isinstance(inner, str):
        return f"gymnasium id {inner!r}"
    obj = inner if inner is not None else target
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    return f"{name} ({_short(path)})" if path else name


def _signature(target: Any) -> str:
    inner = adapted_target(target)
    obj = inner if isinstance(inner, type) else target
    for eval_str in (True, False):  # annotations as written when they cannot be evaluated
        try:
            signature = inspect.signature(obj, eval_str=eval_str).replace(return_annotation=inspect.Signature.empty)
            return f"{getattr(obj, '__qualname__', obj)}{signature}"
        except Exception:  # noqa: BLE001, S112
            continue
    return describe_target(target)


def _short(path: str | None) -> str:
    if not path:
        return "?"
    try:
        short = os.path.relpath(path)
    except ValueError:
        return path
    return path if short.startswith("..") else short


def _unwrap(exc: BaseException) -> BaseException:
    """The env's own exception behind an ``EnvError`` (the vector env's wrapper)."""
    while isinstance(exc, EnvError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _in(path: str, roots: list[Path]) -> bool:
    p = Path(path).resolve()
    return any(p == r or r in p.parents for r in roots)


def own_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """Frames of the user's code: neither the framework, gymnasium, the standard library nor site-packages."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")
            and not _in(f.filename, _FRAMEWORK) and not _in(f.filename, [Path(p) for p in _LIBRARY])]


def _traceback_text(exc: BaseException) -> str:
    """The traceback from the first frame of the user's own code on (all of it if there is none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = own_frames(exc)
    shown = frames[frames.index(own[0]):] if own else frames
    title = "the env's own code" if own else "no frame of the env's own code"
    return (f"Traceback ({title}, most recent call last):\n"
            + "".join(traceback.format_list(shown) + traceback.format_exception_only(type(exc), exc))).rstrip()

def crash_failure(exc: BaseException, cfg: EnvConfig, target: Any) -> CheckFailed:
    """A crash (an exception no check expected) as its row's failure: where in the env's own code, and its traceback."""
    cause = _unwrap(exc)
    own = own_frames(cause)
    where = f" in {own[-1].name}() at {_short(own[-1].filename)}:{own[-1].lineno}" if own else ""
    if isinstance(cause, SyntaxError):  # the user's file and line are in the exception, not in a frame
        where = f" at {_short(cause.filename)}:{cause.lineno}"
    detail = f"{type(cause).__name__}: {cause}{where}"
    fix = ("a crash in the env's own code: see the traceback above" if where else
           "the framework failed on what the env returned: see the traceback above and the rows before this one")
    hints = _kwarg_hints(cfg, target)
    if hints:
        fix += f"; note {'; '.join(hints)}"
    return CheckFailed(detail, fix, tb=_traceback_text(cause))


def _kwarg_hints(cfg: EnvConfig, target: Any) -> list[str]:
    """env.kwargs whose type differs from the constructor parameter's default (untyped parameters)."""
    inner = adapted_target(target)
    obj = inner if isinstance(inner, type) else target
    try:
        params = inspect.signature(obj).parameters if obj is not None else {}
    except (TypeError, ValueError):
        return []
    hints = []
    for key, value in cfg.kwargs.items():
        default = params[key].default if key in params else None
        if default is None or default is inspect.Parameter.empty or type(default) not in (int, float, bool, str):
            continue
        ok = isinstance(value, type(default)) and not (isinstance(value, bool) and type(default) is not bool)
        ok = ok or (type(default) is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            hints.append(f"env.kwargs.{key}={value!r} is a {type(value).__name__}, but its default is the "
                         f"{type(default).__name__} {default!r}")
    return hints

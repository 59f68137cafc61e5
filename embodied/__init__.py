"""embodied: reinforcement-learning fine-tuning of robot policies coupled to simulators.

Importing this package loads neither a simulator nor a model library; those are found through
``embodied.core.registry`` when a config names them. What users import is ``embodied.api`` (the stable surface);
the old paths of modules that moved keep working for a release, with a warning (``embodied.core.moved``).
"""

from __future__ import annotations

import os as _os
import sys as _sys

__version__ = "0.1.0"

CODE_ENV_VAR = "EMBODIED_CODE"  # set on a run's Ray workers: the content hash of the run's copy of this package
CODE_MARKER = "_code_snapshot"  # the file in such a copy that holds its hash (embodied.backends.snapshot)


def _marker(package_dir: str) -> str | None:
    try:
        with open(_os.path.join(package_dir, CODE_MARKER)) as f:
            return f.read().strip()
    except OSError:
        return None


def _run_the_runs_copy() -> None:
    """On a Ray worker of a run (``$EMBODIED_CODE`` set), make ``embodied`` the run's copy of the package when the
    import found another one first.

    Why: Ray puts the driver's working directory at the head of every worker's path, and when that is the source
    tree, ``import embodied`` finds the tree as it is on disk now, which may have been edited since the run began;
    the run's copy (``backends/snapshot.py``) is further down the path, where Ray unpacked it. The copy is
    imported in this module's place (its own ``__init__`` finds its marker and stops there).
    """
    wanted = _os.environ.get(CODE_ENV_VAR)
    if not wanted or _marker(_os.path.dirname(__file__)) == wanted:
        return
    for entry in list(_sys.path):
        if entry and _marker(_os.path.join(entry, __name__)) == wanted:
            import importlib

            _sys.path.insert(0, entry)
            del _sys.modules[__name__]
            _sys.modules[__name__] = importlib.import_module(__name__)
            return
    raise ImportError(f"{CODE_ENV_VAR}={wanted}: the run's copy of embodied is not on this worker's path "
                      f"({_sys.path}); Ray was to unpack it there from the run's runtime_env py_modules")


_run_the_runs_copy()

from embodied.core import moved as _moved  # noqa: E402 - after the hand-over above: the hook of the package in use

_moved.install()

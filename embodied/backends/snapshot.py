"""The code Ray workers run: a copy of the ``embodied`` package, taken when a run's Ray backend starts.

Why: a Ray worker is a process that imports ``embodied`` as it starts: at the beginning of a run, and
again when one is replaced (an env worker's restart) or added. From a source tree installed editable,
a replacement would import whatever is on disk at that moment, mixed with the older code of the driver
and of the other workers. So ``RayBackend`` copies the package once, as it starts, and gives every
actor it creates the copy as a Ray ``runtime_env`` ``py_modules`` entry: Ray uploads it once (its URI
is a hash of its content) and puts it ahead of any install on each worker's Python path, on this
machine or on a cluster's nodes.

The copy is laid out as an installed package: ``envs/`` and ``policies/`` (beside ``embodied/`` in a
source tree) inside it as ``embodied.envs`` and ``embodied.policies``, and the MJCF ``assets/`` where
``mujoco_base.assets_dir`` looks for them, one folder above ``envs/``. It holds its content hash in a
marker file; the actors get the hash as ``$EMBODIED_CODE``, and ``embodied/__init__.py`` on a worker
imports the copy that carries it, wherever Ray put it on the path (Ray puts the driver's working
directory first, which may be the source tree itself).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from embodied import CODE_MARKER

KEPT = 8  # copies of other content kept beside a new one (a run needs its own only until Ray has uploaded it)
SUBPACKAGES = ("envs", "policies")  # installed as embodied.<name>; separate folders in a source tree
SKIPPED = ("__pycache__",)


def package_parts() -> dict[str, Path]:
    """Where each part of the package lives now, by its place in the copy: ``""`` (the ``embodied`` folder),
    ``envs`` and ``policies`` where they are not inside it, and ``assets`` (the MJCF files) where it exists."""
    root = _folder("embodied")
    parts = {"": root}
    for name in SUBPACKAGES:
        where = _folder(f"embodied.{name}")
        if where != root / name:
            parts[name] = where
    assets = (root / "envs" if "envs" not in parts else parts["envs"]).parent / "assets"
    if assets.is_dir() and assets != root / "assets":
        parts["assets"] = assets
    return parts


def _folder(package: str) -> Path:
    """A package's folder, found without importing the package itself."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} is not an importable package here")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@dataclass(frozen=True)
class CodeSnapshot:
    """A copy of the package: its ``embodied`` folder, and the hash of its content (its marker's text)."""

    package: Path
    digest: str


def snapshot_package(into: Path | None = None) -> CodeSnapshot:
    """A copy of the ``embodied`` package as it is on disk now.

    The copy goes to ``into/<content hash>/embodied`` (``into``: this user's temp folder by default), written
    beside and renamed into place, so a copy of the same content is made once and read whole by everyone."""
    files = _files(package_parts())
    digest = hashlib.sha256()
    for rel, path in files:
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    name = digest.hexdigest()[:20]
    base = (into or Path(tempfile.gettempdir()) / f"embodied-code-{os.getuid()}") / name
    snapshot = CodeSnapshot(base / "embodied", name)
    if snapshot.package.is_dir():
        os.utime(base)  # recently used: kept by ``_prune``
        return snapshot
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=_mkdir(base.parent)))
    for rel, path in files:
        target = staging / "embodied" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (staging / "embodied" / CODE_MARKER).write_text(name)
    try:
        staging.rename(base)
    except OSError:  # another process made the same copy first
        shutil.rmtree(staging, ignore_errors=True)
    _prune(base.parent, keep=base)
    return snapshot


def _prune(folder: Path, keep: Path) -> None:
    """Remove all but the ``KEPT`` most recently used copies in ``folder`` (and ``keep``): each edit of the tree
    makes a new one. A run whose copy goes keeps running: its workers get the copy Ray uploaded."""
    copies = sorted((p for p in folder.iterdir() if p.is_dir() and p != keep and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in copies[KEPT:]:
        shutil.rmtree(old, ignore_errors=True)


def _files(parts: dict[str, Path]) -> list[tuple[Path, Path]]:
    """(place in the copy, file now) for every file of the parts, sorted, caches left out."""
    found = []
    for place, folder in parts.items():
        for path in folder.rglob("*"):
            rel = path.relative_to(folder)
            if path.is_file() and not any(p in SKIPPED for p in rel.parts) and path.suffix != ".pyc" \
                    and path.name != CODE_MARKER:
                found.append((Path(place) / rel, path))
    return sorted(found)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

"""Ray workers run the code as it was when the run began: an edit of the source tree mid-run reaches no worker,
not even one started or replaced after it (``embodied/backends/snapshot.py``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodied import CODE_ENV_VAR
from embodied import CODE_MARKER
from embodied.backends.snapshot import package_parts, snapshot_package

ROOT = Path(__file__).resolve().parents[3]


def installed_tree(into: Path) -> Path:
    """A copy of this checkout's package, laid out as installed (envs, policies and assets inside it)."""
    package = into / "embodied"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "embodied", package, ignore=ignore)
    for name in ("envs", "policies", "assets"):
        shutil.copytree(ROOT / name, package / name, ignore=ignore)
    return into


def python(cwd: Path, code: str, env: dict[str, str] | None = None, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose ``import embodied`` finds the package in ``cwd`` first."""
    inherited = {k: v for k, v in os.environ.items() if k != CODE_ENV_VAR}
    environ = {**inherited, "PYTHONPATH": str(cwd), "WANDB_MODE": "disabled", **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=600)


def test_a_snapshot_is_the_package_as_installed_and_changes_with_its_content(tmp_path):
    parts = package_parts()
    assert set(parts) == {"", "envs", "policies", "assets"}  # a source tree: envs, policies and assets beside it
    first = snapshot_package(tmp_path)
    for name in ("envs/mujoco_base.py", "policies/mlp/modeling.py", "assets/robot.xml", "backends/snapshot.py"):
        assert (first.package / name).is_file(), name
    assert (first.package / CODE_MARKER).read_text() == first.digest
    assert not list(first.package.rglob("__pycache__"))
    assert snapshot_package(tmp_path) == first  # the same content: the same copy, made once

    tree = installed_tree(tmp_path / "tree")
    edited = python(tree, "from embodied.backends.snapshot import package_parts, snapshot_package; "
                          "import sys; print(sorted(package_parts())); print(snapshot_package(__import__('pathlib')"
                          ".Path(sys.argv[1])).digest)", None, str(tmp_path))
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout.splitlines()[0] == "['']"  # installed: one folder holds it all
    assert edited.stdout.splitlines()[1] == first.digest  # the same files, laid out another way
    (tree / "embodied" / "runs" / "stop.py").write_text((tree / "embodied" / "runs" / "stop.py").read_text() + "\n# edited\n")
    again = python(tree, "from embodied.backends.snapshot import snapshot_package; import sys, pathlib; "
                         "print(snapshot_package(pathlib.Path(sys.argv[1])).digest)", None, str(tmp_path))
    assert again.returncode == 0 and again.stdout.strip() != first.digest


def test_a_worker_imports_the_runs_copy_though_the_edited_tree_comes_first_on_its_path(tmp_path):
    """Ray puts the driver's working directory (here the source tree) first on a worker's path; with the run's
    hash in $EMBODIED_CODE, ``import embodied`` still gives the run's copy, found further down the path."""
    copy = snapshot_package(tmp_path / "copies")
    tree = installed_tree(tmp_path / "tree")
    probe = "import sys, embodied, embodied.envs.mujoco_base as m; print(embodied.__file__); print(m.__file__)"
    env = {"PYTHONPATH": f"{tree}{os.pathsep}{copy.package.parent}"}
    plain = python(tree, probe, env)
    assert plain.returncode == 0 and plain.stdout.startswith(str(tree))  # without it: the tree, as Python finds it
    run = python(tree, probe, {**env, CODE_ENV_VAR: copy.digest})
    assert run.returncode == 0, run.stderr
    assert all(line.startswith(str(copy.package)) for line in run.stdout.splitlines())
    lost = python(tree, probe, {"PYTHONPATH": str(tree), CODE_ENV_VAR: copy.digest})
    assert lost.returncode != 0 and f"{CODE_ENV_VAR}={copy.digest}: the run's copy of embodied is not" in lost.stderr


EDIT_MID_RUN = """
import json, sys
from pathlib import Path

import ray

from embodied.config.schema import ClusterConfig
from embodied.backends import RayBackend


class Probe:
    def edited(self):
        import embodied.core.atomic as module  # imported by the worker, after the edit for a worker started after it
        return getattr(module, "EDITED", False), module.__file__


backend = RayBackend(ClusterConfig(backend="ray"))  # starts a Ray for the run, from the tree (this cwd)
try:
    group = backend.create(Probe, [(), ()])
    before = backend.wait(group.call("edited"))
    module = Path("embodied/core/atomic.py")
    module.write_text(module.read_text() + "\\nEDITED = True\\n")  # the edit, mid-run
    group.restart(1, ())  # a replaced worker (an env worker's restart) starts after it
    later = backend.create(Probe, [()])  # and so does a group made later in the run
    after = backend.wait(group.call("edited")) + backend.wait(later.call("edited"))
    unsnapshotted = ray.get(ray.remote(Probe).remote().edited.remote())  # an actor without the run's copy
finally:
    backend.shutdown()
print(json.dumps({"before": before, "after": after, "unsnapshotted": unsnapshotted, "copy": str(backend.code.package)}))
"""


@pytest.mark.ray
@pytest.mark.timeout(600)
def test_an_edit_mid_run_reaches_no_ray_worker_started_or_replaced_after_it(tmp_path):
    tree = installed_tree(tmp_path / "tree")
    proc = python(tree, EDIT_MID_RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["unsnapshotted"][0] is True  # the hazard: a worker started now imports the edited tree
    for edited, path in seen["before"] + seen["after"]:
        assert edited is False  # every worker of the run, the replaced one and the later group's too
        assert not path.startswith(str(tree)) and "/embodied/core/atomic.py" in path  # the run's copy, unpacked by Ray

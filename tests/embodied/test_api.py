"""The public surface holds still: ``embodied.api`` declares every name a guide imports, and each of them imports;
the old import paths of modules that moved still work, warning once with the new place; ``import embodied``
stays light (``embodied/api.py``, ``embodied/core/moved.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import embodied.api as api
from embodied.core import moved
from embodied.layers import LAYERS

ROOT = Path(__file__).resolve().parents[2]
# ``from embodied.x import a, b`` on one line, or ``from embodied.x import (a,\n b)`` over several; a leading
# backquote or quote mark (inline code) is allowed.
IMPORT = re.compile(r"^[ \t>`]*from[ \t]+(embodied(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n`]*)", re.M)


def guide_files() -> list[Path]:
    """README.md, every page under docs/ and the example code the guides show."""
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(docs.rglob("*.md")), *sorted((docs / "examples").rglob("*.py"))]


def imports_in(text: str) -> list[tuple[str, str]]:
    """(module, name) for each name of each ``from embodied... import ...`` in ``text``."""
    found = []
    for module, names in IMPORT.findall(text):
        for part in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
            name = part.split(" as ")[0].strip()
            if name:
                found.append((module, name))
    return found


def guide_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) for every embodied import the guides show users."""
    return [(str(path.relative_to(ROOT)), module, name) for path in guide_files()
            for module, name in imports_in(path.read_text())]


def test_the_scan_reads_one_line_and_parenthesised_imports():
    text = ("Some prose: SFT from embodied's format.\n```python\nfrom embodied.api import ENVS\n"
            "from embodied.api import (Policy,  # the contract\n    PolicySpec as Spec,\n)\n"
            "    from embodied.core.types import Trajectory\n```\n`from embodied.api import Obs`\n")
    assert imports_in(text) == [("embodied.api", "ENVS"), ("embodied.api", "Policy"), ("embodied.api", "PolicySpec"),
                                ("embodied.core.types", "Trajectory"), ("embodied.api", "Obs")]


def test_the_guides_are_read():
    found = guide_imports()
    files = {where for where, _, _ in found}
    assert {"docs/custom_simulator.md", "docs/extending.md", "docs/examples/my_algo/reinforce.py"} <= files
    assert ("docs/extending.md", "embodied.api", "learning_rate") in found  # from the parenthesised import


def problems_of(imports: list[tuple[str, str, str]]) -> list[str]:
    """What is wrong with each guide import: it fails, its name is not declared by ``embodied.api``, or the api
    gives another object under that name."""
    problems = []
    for where, module, name in imports:
        scope: dict = {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # an old path a guide shows on purpose
                exec(f"from {module} import {name}", scope)  # noqa: S102 - the guide's own import line
        except ImportError as exc:
            problems.append(f"{where}: from {module} import {name}: {exc}")
            continue
        if name not in api.__all__:
            problems.append(f"{where}: from {module} import {name}: {name} is not in embodied.api.__all__")
        elif getattr(api, name) is not scope[name]:
            problems.append(f"{where}: from {module} import {name}: embodied.api.{name} is another object")
    return problems


def test_every_name_a_guide_imports_is_declared_by_the_api():
    problems = problems_of(guide_imports())
    assert not problems, "add each to embodied/api.py's table, or import it from there:\n" + "\n".join(problems)


def test_the_check_fails_on_an_undeclared_name_and_a_broken_import():
    problems = problems_of([("x.md", "embodied.core.types", "obs_slice"), ("y.md", "embodied.types2", "Obs")])
    assert len(problems) == 2
    assert "x.md: from embodied.core.types import obs_slice: obs_slice is not in embodied.api.__all__" in problems[0]
    assert problems[1].startswith("y.md: from embodied.types2 import Obs: ")


def test_every_name_of_the_api_imports():
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    scope: dict = {}
    exec("from embodied.api import *", scope)  # noqa: S102
    assert set(api.__all__) <= set(scope) and sorted(dir(api)) == sorted(api.__all__)
    with pytest.raises(AttributeError, match="embodied.api"):
        api.NoSuchName  # noqa: B018


def test_the_api_is_the_top_layer_so_nothing_in_the_engine_imports_it():
    assert LAYERS[-1][1] == ["embodied.api"]  # tests/embodied/test_layers.py refuses an import of it from below


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, from the repository root."""
    environ = {**os.environ, "WANDB_MODE": "disabled", **env}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=600)


HEAVY = ("torch", "mujoco", "transformers", "ray")
LOADED = f"import sys, json; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"


@pytest.mark.parametrize("imports", [
    "import embodied",
    # what a simulator's module and a torch-free config module import (the config loader imports the latter)
    "from embodied.api import ChunkStepResult, EpisodeStats, ENVS, STATES, OnPolicyConfig, PolicyConfig, PolicySpec",
])
def test_importing_embodied_or_its_torch_free_names_loads_neither_torch_nor_mujoco(imports):
    proc = python(f"{imports}\n{LOADED}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_the_guides_torch_free_config_modules_stay_torch_free():
    proc = python(f"import my_algo.reinforce_config, my_policy.configuration\n{LOADED}",
                  PYTHONPATH=str(ROOT / "docs" / "examples"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []


OLD_PATHS = r"""
import importlib, json, sys, warnings

from embodied.core import moved

def attempt(statement):
    # the statement as a user's file would run it; the FutureWarnings it gives, with the file they point at
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope = {}
        exec(compile(statement, "user.py", "exec"), scope)
    return scope, [[str(w.message), w.filename] for w in caught if issubclass(w.category, FutureWarning)]

out = {}
# a module of a package that moved whole first: its one warning names the package
olds = [p + ".rows" if p.endswith("check_env") else p + ".base" for p in moved.MOVED_PACKAGES]
olds += list(moved.MOVED_MODULES) + list(moved.MOVED_PACKAGES)
for old in olds:
    _, first = attempt(f"import {old}")
    _, again = attempt(f"import {old}")
    new = moved.new_module(old)
    out[old] = {"new": new, "warnings": first, "again": again,
                "same": sys.modules[old] is importlib.import_module(new)}
for package, homes in moved.BECAME_PACKAGES.items():
    for home, names in homes.items():
        for name in names:
            scope, first = attempt(f"from {package} import {name}")
            _, again = attempt(f"from {package} import {name}")
            out[f"{package}.{name}"] = {"new": f"{home}.{name}", "warnings": first, "again": again,
                                        "same": scope[name] is getattr(importlib.import_module(home), name)}
scope, _ = attempt("from embodied.types import ChunkStepResult")
import embodied.core.types
out["identity"] = scope["ChunkStepResult"] is embodied.core.types.ChunkStepResult
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def old_paths() -> dict:
    """What each old import path gives in one fresh interpreter (importing every moved module: seconds)."""
    proc = python(OLD_PATHS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def old_path_cases() -> list[str]:
    subs = [p + ".rows" if p.endswith("check_env") else p + ".base" for p in moved.MOVED_PACKAGES]
    names = [f"{p}.{n}" for p, homes in moved.BECAME_PACKAGES.items() for ns in homes.values() for n in ns]
    return [*subs, *moved.MOVED_MODULES, *names]


@pytest.mark.parametrize("old", old_path_cases())
def test_an_old_import_path_warns_once_naming_the_new_and_gives_the_same_object(old_paths, old):
    seen = old_paths[old]
    package = next((p for p in moved.MOVED_PACKAGES if old.startswith(p + ".")), None)
    named = f"{package} moved to {moved.MOVED_PACKAGES[package]}" if package else f"{old} moved to {seen['new']}"
    assert [message.split(";")[0] for message, _ in seen["warnings"]] == [named]
    assert [where for _, where in seen["warnings"]] == ["user.py"]  # it points at the user's import line
    assert seen["again"] == [] and seen["same"] is True


def test_a_package_that_moved_whole_warns_once_for_all_its_modules(old_paths):
    for package in moved.MOVED_PACKAGES:
        assert old_paths[package]["warnings"] == [] and old_paths[package]["same"] is True  # warned by its module


def test_the_old_guide_lines_give_the_new_objects(old_paths):
    assert old_paths["identity"] is True
    assert old_paths["embodied.policy.Policy"]["new"] == "embodied.policy.base.Policy"
    assert old_paths["embodied.policy.PolicySpec"]["new"] == "embodied.policy.config.PolicySpec"


def test_a_name_no_old_module_had_is_still_an_attribute_error():
    import embodied.policy

    with pytest.raises(AttributeError, match="'embodied.policy' has no attribute 'Nope'"):
        embodied.policy.Nope  # noqa: B018
    assert moved.new_module("embodied.core.types") is None and moved.new_module("embodied.policy") is None

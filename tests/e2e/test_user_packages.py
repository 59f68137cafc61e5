"""A user project with its own top-level ``envs`` and ``policies`` packages works beside ours.

Most RL repositories have an ``envs/`` (and often a ``policies/``) package of their own, run from
the project folder (so it is on ``sys.path``). Ours are installed as ``embodied.envs`` and
``embodied.policies`` (``pyproject.toml`` maps the top-level source folders there), so both resolve:
the user's ``envs.my_env:MyEnv`` and our ``Reach-v0``, even when the user's package has modules
named like ours (``envs/reach.py``, ``policies/mlp``). Checked on the editable install the
Makefile makes and on a regular install of the built wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_FILES = {
    "envs/__init__.py": '"""The user\'s own envs package."""\nUSER_ENVS = True\n',
    "envs/reach.py": "class ReachEnv:\n    '''The user's own reach module: a name ours has too.'''\n",
    "envs/my_env.py": textwrap.dedent('''
        import gymnasium as gym
        import numpy as np


        class MyEnv(gym.Env):
            """A plain gymnasium env of the user's."""

            metadata = {"render_modes": ["rgb_array"]}

            def __init__(self, render_mode=None, size: int = 3):
                self.render_mode = render_mode
                self.observation_space = gym.spaces.Box(-1.0, 1.0, (size,), np.float64)
                self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return self.np_random.uniform(-1, 1, self.observation_space.shape), {}

            def step(self, action):
                obs = self.np_random.uniform(-1, 1, self.observation_space.shape)
                return obs, float(action[0]), False, False, {"success": False}
    '''),
    "policies/__init__.py": "USER_POLICIES = True\n",
    "policies/mlp/__init__.py": "'''The user's own mlp: a name ours has too.'''\n",
}

CHECKS = textwrap.dedent('''
    import sys
    from pathlib import Path

    project = Path.cwd().resolve()
    import envs, policies  # the user's, from the project folder

    assert envs.USER_ENVS and policies.USER_POLICIES, (envs, policies)
    from embodied.core.registry import ENVS, POLICIES

    reach = ENVS.resolve("Reach-v0")
    assert reach.__name__ == "ReachEnv" and project not in Path(sys.modules[reach.__module__].__file__).parents, \\
        sys.modules[reach.__module__].__file__
    mine = ENVS.resolve("envs.my_env:MyEnv")
    assert mine.args[0].__module__ == "envs.my_env", mine
    mlp = POLICIES.resolve("mlp")
    assert project not in Path(sys.modules[mlp.__module__].__file__).parents
    from embodied.cli import main

    for env_id in ("envs.my_env:MyEnv", "Reach-v0"):
        code = main(["check-env", env_id, "--steps", "8"])
        assert code == 0, (env_id, code)
    import embodied

    print("both resolve; ours from", Path(embodied.__file__).parent, "and", sys.modules[reach.__module__].__file__)
''')


def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for name, text in USER_FILES.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (project / "checks.py").write_text(CHECKS)
    return project


def run_checks(project: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = prelude + f"\nexec(open({str(project / 'checks.py')!r}).read())\n"
    env = {**os.environ, "PYTHONPATH": str(project), "WANDB_MODE": "disabled", "MUJOCO_GL": os.environ.get(
        "MUJOCO_GL", "egl"), "EMBODIED_ASSETS": str(ROOT / "assets")}
    return subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_user_envs_and_policies_packages_beside_ours_editable_install(tmp_path):
    """The install the Makefile makes (``pip install -e .``), run from the user's project folder."""
    proc = run_checks(user_project(tmp_path))
    assert proc.returncode == 0 and "both resolve" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"and {ROOT / 'envs' / 'reach.py'}" in proc.stdout  # the repo's folder, under its installed name


@pytest.mark.slow
def test_user_envs_and_policies_packages_beside_ours_regular_install(tmp_path):
    """A regular install of the wheel (only the installed files, no editable finder, no repo on the path)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("embodied", "envs", "policies"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
                   check=True, capture_output=True, timeout=600)
    [wheel] = wheels.glob("embodied-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True,
                   capture_output=True, timeout=600)
    # As installed: the project folder (PYTHONPATH) first, then the wheel's files and metadata ahead of
    # the editable install's, whose finder is taken out; the repo itself is not on the path.
    prelude = textwrap.dedent(f'''
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
        path = [p for p in sys.path if p not in ("", {str(ROOT)!r})]
        at = path.index({str(tmp_path / "project")!r}) + 1
        sys.path[:] = path[:at] + [{str(site)!r}] + path[at:]
    ''')
    proc = run_checks(user_project(tmp_path), prelude)
    assert proc.returncode == 0 and "both resolve" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"ours from {site / 'embodied'} and {site / 'embodied' / 'envs' / 'reach.py'}" in proc.stdout


# -- the list of installed packages and the import names stay right ------------------------------


def pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_installed_under_embodied():
    setuptools = pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"embodied.envs": "envs", "embodied.policies": "policies"}
    folders = {"embodied": "embodied", "embodied.envs": "envs", "embodied.policies": "policies"}
    found = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert sorted(setuptools["packages"]) == sorted(found), "list the new package in pyproject.toml's packages"


def test_entry_points_name_our_packages_by_their_installed_names():
    groups = pyproject()["project"]["entry-points"]
    for group, entries in groups.items():
        for name, target in entries.items():
            assert target.startswith("embodied."), (group, name, target)


def test_no_module_imports_envs_or_policies_by_their_top_level_names():
    """``from envs.x import`` would find a user's own ``envs`` package (or a second copy of ours)."""
    import re

    pattern = re.compile(r"""^\s*(from|import)\s+(envs|policies)\b|["'](envs|policies)\.\w+[\w.]*(:|["'])""")
    offenders = []
    for folder in ("embodied", "envs", "policies", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "import embodied.envs / embodied.policies instead:\n" + "\n".join(offenders)

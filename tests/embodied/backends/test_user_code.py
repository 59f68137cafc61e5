"""A Ray run ships the user's own packages that its config names, and refuses, before any worker starts, what a
cluster could not get (``embodied/backends/user_code.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied.backends.user_code import named_modules, shipped_paths, user_packages
from embodied.config import ConfigError, load_config
from embodied.core.registry import ENVS

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "docs" / "examples"


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# A worker class of the user's: where its process imports the user's modules from.
PROBE = """
class Probe:
    def where(self):
        import usr_pkg.sim
        import usr_single

        return [usr_pkg.sim.__file__, usr_single.__file__]
"""


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source folder on the driver's path with a package ``usr_pkg``, a single-file module ``usr_single`` and a
    namespace package ``usr_ns`` spread over two folders."""
    src, other = tmp_path / "src", tmp_path / "other"
    write(src / "usr_pkg" / "__init__.py")
    write(src / "usr_pkg" / "sim.py", PROBE)
    write(src / "usr_single.py", "class Sim:\n    pass\n")
    write(src / "usr_ns" / "a.py")
    write(other / "usr_ns" / "b.py")
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.syspath_prepend(str(src))
    return src


def test_a_source_package_and_a_single_file_are_shipped_each_once(sources):
    named = [("env.id", "usr_pkg.sim"), ("eval_env.id", "usr_single"), ("policy.type", "usr_pkg")]
    for remote in (False, True):
        assert shipped_paths(named, remote) == [(sources / "usr_pkg").resolve(), (sources / "usr_single.py").resolve()]


def test_installed_standard_and_embodied_modules_are_not_shipped(sources):
    named = [("env.id", "gymnasium.envs.classic_control.cartpole"), ("env.id", "json"), ("env.id", "sys"),
             ("env.id", "embodied.envs.reach"), ("policy.type", "embodied.policies.mlp.configuration"),
             ("env.id", "no_such_module_here")]
    assert shipped_paths(named, remote=True) == []


def test_a_namespace_package_ships_each_of_its_source_folders(sources):
    assert shipped_paths([("env.id", "usr_ns.a")], remote=True) == [(sources / "usr_ns").resolve(),
                                                                      (sources.parent / "other" / "usr_ns").resolve()]


@pytest.mark.parametrize("module", ["__main__"])
def test_what_cannot_be_shipped_is_refused_for_a_cluster_naming_field_module_and_fix(sources, module):
    assert shipped_paths([("env.id", module)], remote=False) == []  # a Ray on this machine may find it as we do
    with pytest.raises(ConfigError) as error:
        shipped_paths([("env.id", module)], remote=True)
    message = str(error.value)
    assert message.startswith(f"env.id: module {module!r} ")
    assert "put it in a package" in message and "pip install it on every node" in message


@pytest.fixture
def examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as `PYTHONPATH=docs/examples` in the guides' commands


def test_the_modules_a_config_names_are_found_in_each_field(examples_importable):
    linear = load_config(EXAMPLES / "reach_linear_ppo.yaml", ["eval_env.id=my_sim.plain_point:PlainPointEnv"])
    reinforce = load_config(EXAMPLES / "reach_reinforce.yaml", ["cluster.backend=ray"])
    assert {("eval_env.id", "my_sim.plain_point"), ("policy.type", "my_policy.configuration"),
            ("policy.type", "my_policy.modeling"), ("env.id", "embodied.envs.reach")} <= set(named_modules(linear))
    assert {("algorithm.name", "my_algo.reinforce_config"), ("algorithm.name", "my_algo.reinforce")} \
        <= set(named_modules(reinforce))
    assert user_packages(linear) == []  # the local backend ships nothing
    assert user_packages(reinforce) == [EXAMPLES / "my_algo"]  # Reach and the MLP are embodied's own
    on_ray = load_config(EXAMPLES / "reach_linear_ppo.yaml", ["cluster.backend=ray",
                                                              "eval_env.id=my_sim.plain_point:PlainPointEnv"])
    assert user_packages(on_ray) == [EXAMPLES / "my_sim", EXAMPLES / "my_policy"]


def test_a_short_name_registered_at_run_time_is_looked_up(examples_importable, monkeypatch):
    ENVS.names()  # the entry points read, then a copy to register into (undone after the test)
    monkeypatch.setattr(ENVS, "_entries", dict(ENVS._entries))
    ENVS.register("PlainPoint-v0", "my_sim.plain_point:PlainPointEnv")
    cfg = load_config(EXAMPLES / "plain_point.yaml", ["env.id=PlainPoint-v0"])
    assert ("env.id", "my_sim.plain_point") in named_modules(cfg)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_ray_workers_import_the_shipped_package_and_file(ray_session, sources):
    from embodied.backends import RayBackend
    from embodied.config import ClusterConfig

    import usr_pkg.sim

    # Ray's workers get the driver's working directory and PYTHONPATH, not ``sources``: they can import the user's
    # modules (the worker class itself included) only from what the backend ships.
    backend = RayBackend(ClusterConfig(backend="ray"), [sources / "usr_pkg", sources / "usr_single.py"])
    try:
        files = backend.wait(backend.create(usr_pkg.sim.Probe, [()]).call("where"))[0]
    finally:
        backend.shutdown()
    assert files[0].endswith("/usr_pkg/sim.py") and files[1].endswith("/usr_single.py")
    assert not any(f.startswith(str(sources)) for f in files)  # Ray's unpacked copies, not the driver's files


def test_a_namespace_package_found_twice_on_the_path_ships_once(tmp_path, monkeypatch):
    """A folder without __init__.py on the path both as the working directory ('') and by its absolute path: one
    portion, shipped once (the test suite's own ``tests`` folder, run from the repository root)."""
    write(tmp_path / "nspkg_here" / "sim.py", "class Sim: ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend("")
    assert shipped_paths([("env.id", "nspkg_here.sim")], remote=True) == [(tmp_path / "nspkg_here").resolve()]

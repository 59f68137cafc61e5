"""Lazy ``module:attr`` registries: nothing is imported until resolve, unknown names list known ones."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from embodied.core.registry import ENVS, POLICIES, Registry, UnknownNameError, load_entry_point

ROOT = Path(__file__).resolve().parents[3]


def fresh(group: str = "embodied.tests.no-such-group") -> Registry:
    """A registry over an entry-point group nobody declares, so it starts empty."""
    return Registry("thing", group)


def write_module(tmp_path: Path, monkeypatch, name: str, body: str = "VALUE = 42\n") -> str:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_register_imports_nothing_until_resolve(tmp_path, monkeypatch):
    name = write_module(tmp_path, monkeypatch, "embodied_lazy_probe", "VALUE = 42\nclass Thing:\n    x = 1\n")
    reg = fresh()
    reg.register("probe", f"{name}:VALUE")
    reg.register("thing", f"{name}:Thing.x")
    assert "probe" in reg and reg.names() == ["probe", "thing"]
    assert reg.entry_point("probe") == f"{name}:VALUE"
    assert name not in sys.modules  # registering, listing and looking up import nothing
    assert reg.resolve("probe") == 42
    assert name in sys.modules
    assert reg.resolve("thing") == 1  # dotted attributes


def test_register_accepts_objects():
    reg = fresh()
    marker = object()
    reg.register("obj", marker)
    assert reg.resolve("obj") is marker


def test_register_twice_needs_overwrite():
    reg = fresh()
    reg.register("a", "json:dumps")
    reg.register("a", "json:dumps")  # the same entry point again is fine
    with pytest.raises(ValueError, match="already registered as 'json:dumps'"):
        reg.register("a", "json:loads")
    reg.register("a", "json:loads", overwrite=True)
    import json

    assert reg.resolve("a") is json.loads


def test_unknown_name_lists_known_ones_and_close_matches():
    reg = fresh()
    for n in ("Reach-v0", "Push-v0", "Lift-v1"):
        reg.register(n, f"embodied.envs.x:{n}")
    with pytest.raises(UnknownNameError) as info:
        reg.resolve("Reach-v1")
    msg = str(info.value)
    assert "unknown thing 'Reach-v1'" in msg
    assert "did you mean 'Reach-v0'" in msg
    assert "Known: Lift-v1, Push-v0, Reach-v0" in msg
    assert "package.module:attr" in msg
    assert isinstance(info.value, KeyError)


def test_unknown_name_without_close_match_has_no_suggestion():
    reg = fresh()
    reg.register("Reach-v0", "embodied.envs.reach:ReachEnv")
    msg = str(pytest.raises(UnknownNameError, reg.entry_point, "zzzzzz").value)
    assert "did you mean" not in msg and "Known: Reach-v0" in msg


def test_empty_registry_says_none():
    msg = str(pytest.raises(UnknownNameError, fresh().resolve, "x").value)
    assert "(none)" in msg


def test_direct_module_attr_entry_points_resolve_without_registration():
    reg = fresh()
    import collections

    assert reg.resolve("collections:OrderedDict") is collections.OrderedDict
    assert reg.entry_point("tests.toy_envs:CountingEnv") == "tests.toy_envs:CountingEnv"
    from tests.toy_envs import CountingEnv

    assert ENVS.resolve("tests.toy_envs:CountingEnv") is CountingEnv


@pytest.mark.parametrize("bad", ["no_colon", ":attr", "module:", ""])
def test_malformed_entry_point_strings(bad):
    with pytest.raises(ValueError, match="must look like 'package.module:attr'"):
        load_entry_point(bad)


def test_entry_point_with_missing_module_names_it():
    with pytest.raises(ImportError) as info:
        fresh().resolve("no_such_pkg_xyz.mod:Thing")
    assert "no_such_pkg_xyz.mod" in str(info.value) and "'no_such_pkg_xyz.mod:Thing'" in str(info.value)


def test_entry_point_with_missing_attribute_names_it():
    with pytest.raises(ImportError) as info:
        fresh().resolve("json:no_such_attr")
    assert "no attribute 'no_such_attr'" in str(info.value) and "json:no_such_attr" in str(info.value)


def test_registered_but_broken_entry_point_fails_on_resolve_only():
    reg = fresh()
    reg.register("broken", "no_such_pkg_xyz:Thing")
    assert "broken" in reg
    with pytest.raises(ImportError, match="no_such_pkg_xyz"):
        reg.resolve("broken")


def test_entry_point_group_discovery_finds_the_builtins():
    assert "Reach-v0" in ENVS.names()
    assert ENVS.entry_point("Reach-v0") == "embodied.envs.reach:ReachEnv"
    assert "mlp" in POLICIES.names()
    assert POLICIES.entry_point("mlp") == "embodied.policies.mlp.configuration:MLPConfig"
    from embodied.policies.mlp.configuration import MLPConfig

    assert POLICIES.resolve("mlp") is MLPConfig
    # A registry over the same group discovers the same names on its own.
    assert "Reach-v0" in Registry("env", "embodied.envs")


def test_registering_beside_discovered_entries_keeps_them():
    reg = Registry("env", "embodied.envs")
    reg.register("Mine-v0", "my_pkg.env:MyEnv")
    assert {"Mine-v0", "Reach-v0"} <= set(reg.names())
    with pytest.raises(ValueError, match="already registered"):
        reg.register("Reach-v0", "my_pkg.env:Other")


def test_importing_the_engine_loads_no_simulator_or_model_library():
    # One subprocess (a clean sys.modules) importing every engine entry module in turn.
    code = textwrap.dedent(f"""
        import sys
        heavy_names = ("mujoco", "transformers", "embodied.envs.reach", "embodied.envs.mujoco_base", "embodied.policies.mlp.modeling")
        for module in ("embodied", "embodied.config", "embodied.core.registry", "embodied.policy.base", "embodied.runs.train",
                       "embodied.cli"):
            __import__(module)
            heavy = [m for m in heavy_names if m in sys.modules]
            assert not heavy, (module, heavy)
        from embodied.config import load_config
        load_config({str(ROOT / 'configs' / 'reach_mlp_ppo.yaml')!r})  # resolves policy.type, not env.id
        heavy = [m for m in heavy_names if m in sys.modules]
        assert not heavy, ("load_config", heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr

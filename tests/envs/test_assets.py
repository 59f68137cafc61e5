"""Every scene under assets/ compiles, and a broken one fails with a message naming the file."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import pytest

from embodied.envs.mujoco_base import MJCFError, assets_dir, load_model
from embodied.envs.reach import ReachEnv

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def is_scene(path: Path) -> bool:
    """A top-level scene: a <mujoco> root with a <worldbody>; ``_*.xml`` files are include-only fragments."""
    if path.name.startswith("_"):
        return False
    root = ET.parse(path).getroot()
    return root.tag == "mujoco" and root.find("worldbody") is not None


SCENES = sorted(p for p in ASSETS.rglob("*.xml") if is_scene(p))


def test_assets_folder_has_scenes() -> None:
    assert assets_dir() == ASSETS or "EMBODIED_ASSETS" in os.environ
    names = {p.name for p in SCENES}
    assert {"robot.xml", "reach.xml"} <= names


@pytest.mark.parametrize("path", SCENES, ids=lambda p: str(p.relative_to(ASSETS)))
def test_scene_compiles(path: Path) -> None:
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    mujoco.mj_step(model, data, 10)  # and simulates without blowing up
    assert all(abs(x) < 1e3 for x in data.qpos)


def test_broken_mjcf_names_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "reach.xml"
    broken.write_text("<mujoco>\n  <worldbody>\n    <geom type='bogus'/>\n  </worldbody>\n</mujoco>\n")
    monkeypatch.setenv("EMBODIED_ASSETS", str(tmp_path))
    with pytest.raises(MJCFError, match="reach.xml") as err:
        ReachEnv()
    assert str(broken) in str(err.value) and "line 3" in str(err.value)


def test_missing_mjcf_names_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBODIED_ASSETS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="reach.xml"):
        load_model("reach.xml")


def test_assets_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for path in ASSETS.glob("*.xml"):
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setenv("EMBODIED_ASSETS", str(tmp_path))
    assert assets_dir() == tmp_path
    env = ReachEnv()
    env.reset(seed=0)
    env.close()

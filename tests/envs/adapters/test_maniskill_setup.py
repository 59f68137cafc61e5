"""ManiSkill's adapter without building a scene: the id table, the Vulkan driver's choice, the refusals (a task that
needs a download, a backend the machine lacks), and the CPU/CUDA path choice. Fast: nothing here starts SAPIEN."""

from __future__ import annotations

import json

import pytest

from embodied.core.registry import ENVS
from embodied.env_runtime.catalog import describe_env
from embodied.envs.adapters.maniskill import batched, classes, env as ms_env, tasks, vulkan
from embodied.envs.adapters.maniskill.observations import camera_map
from embodied.envs.adapters.maniskill.vulkan import ManiSkillSetupError

RUNS_HERE = ("PickCube-v1", "PushCube-v1", "PullCube-v1", "StackCube-v1", "PegInsertionSide-v1", "PlugCharger-v1",
             "LiftPegUpright-v1", "PokeCube-v1", "PushT-v1", "RollBall-v1", "PlaceSphere-v1", "MS-CartpoleBalance-v1")


def test_every_task_is_a_registered_id_with_its_own_class_and_cap():
    ids = [t.env_id for t in tasks.TASKS]
    assert len(ids) == len(set(ids)) and all(i.startswith("ManiSkill-") for i in ids)
    for name in RUNS_HERE:
        task = tasks.task_for(name)
        assert not task.assets and ENVS.entry_point(task.env_id) == f"embodied.envs.adapters.maniskill.classes:{task.class_name}"
    cls = ENVS.resolve("ManiSkill-PickCube-v1")
    assert cls.task.maniskill_id == "PickCube-v1" and cls.default_max_episode_steps() == 50
    assert cls.__name__ == "ManiSkill_PickCube_v1" and classes.ManiSkill_PickCube_v1 is cls  # pickles by name
    assert tasks.task_for("PegInsertionSide-v1").description == "peg insertion side"
    assert tasks.task_for("MS-CartpoleBalance-v1").description == "cartpole balance"
    with pytest.raises(ValueError, match="unknown ManiSkill task 'PickCubes-v1'"):
        tasks.task_for("PickCubes-v1")


def test_a_task_needing_a_download_names_the_asset_and_the_command(monkeypatch):
    monkeypatch.setattr(tasks, "_downloaded", lambda asset: False)
    ycb = ENVS.resolve("ManiSkill-PickSingleYCB-v1")
    why = ycb.unavailable()
    assert "ycb" in why and "python -m mani_skill.utils.download_asset ycb" in why
    with pytest.raises(ManiSkillSetupError, match="download_asset ycb"):
        ycb()  # refused before ManiSkill builds (or prompts for) anything
    row = describe_env("ManiSkill-PickSingleYCB-v1")  # `embodied list envs`, described from the class
    assert row.error.startswith("unavailable:") and "download_asset ycb" in row.error
    assert ENVS.resolve("ManiSkill-PickCube-v1").unavailable() == ""
    bridge = tasks.task_for("PutCarrotOnPlateInScene-v1")
    assert "bridge_v2_real2sim" in tasks.missing_assets(bridge)


def test_list_envs_describes_the_suite_without_building(monkeypatch):
    monkeypatch.setattr(ms_env, "make_maniskill", lambda *a, **k: pytest.fail("list envs built a scene"))
    row = describe_env("ManiSkill-PickCube-v1")
    assert row.family == "adapters of other suites" and row.obs_modes == ["state", "rgb", "state+rgb"]
    assert "PickCube-v1" in row.summary and not row.error


def test_vulkan_driver_choice(monkeypatch, tmp_path):
    for var in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EMBODIED_VULKAN_DIR", str(tmp_path))
    monkeypatch.setattr(vulkan, "system_manifests", lambda: [])
    none = vulkan.choose_driver()
    assert none.source == "none"
    text = vulkan.explain(none, RuntimeError("vk::createInstanceUnique: ErrorIncompatibleDriver"))
    assert "no Vulkan driver" in text and "make setup" in text and "mesa-vulkan-drivers" in text
    (tmp_path / "lvp_icd.json").write_text(json.dumps({"ICD": {}, "embodied": {"version": "25.0.7"}}))
    private = vulkan.choose_driver()
    assert private.source == "private lavapipe" and private.version == "25.0.7"
    assert vulkan.os.environ["VK_ICD_FILENAMES"] == str(tmp_path / "lvp_icd.json")  # named for SAPIEN's loader
    assert vulkan.choose_driver().source == "private lavapipe"  # named by the call before: still ours
    monkeypatch.setenv("VK_ICD_FILENAMES", "/opt/my_icd.json")
    assert vulkan.choose_driver().source == "environment"  # a driver the user names is left alone
    monkeypatch.delenv("VK_ICD_FILENAMES")
    monkeypatch.setattr(vulkan, "system_manifests", lambda: [vulkan.Path("/usr/share/vulkan/icd.d/nvidia_icd.json")])
    assert vulkan.choose_driver().source == "system GPU"  # a GPU's driver comes before the private lavapipe
    old = vulkan.explain(vulkan.VulkanDriver("system", "/usr/share/vulkan/icd.d/lvp_icd.json", ""), RuntimeError("x"))
    assert "descriptorBindingPartiallyBound" in old


def test_cpu_gets_one_env_a_process_and_cuda_the_batch(monkeypatch):
    cls = ENVS.resolve("ManiSkill-PickCube-v1")
    monkeypatch.setattr(ms_env, "cuda_available", lambda: False)
    monkeypatch.setattr(batched, "cuda_available", lambda: False)
    assert cls.batched_twin("state") is None  # the env factory builds ManiSkillEnv per env
    with pytest.raises(ManiSkillSetupError, match=r"needs a CUDA device.*torch.cuda.is_available\(\) is False"):
        batched.choose_backend(cls.task, "physx_cuda", 64)
    with pytest.raises(ManiSkillSetupError, match="holds one env, not 4"):
        batched.choose_backend(cls.task, "auto", 4)
    assert batched.choose_backend(cls.task, "auto", 1) == "physx_cpu"
    with pytest.raises(ManiSkillSetupError, match="physx_cuda needs a CUDA device"):
        cls(sim_backend="physx_cuda")
    monkeypatch.setattr(ms_env, "cuda_available", lambda: True)
    monkeypatch.setattr(batched, "cuda_available", lambda: True)
    twin = cls.batched_twin("rgb")
    assert twin is batched.ManiSkill_PickCube_v1_Batched and twin.batched and twin.task is cls.task
    assert batched.choose_backend(cls.task, "auto", 512) == "physx_cuda"
    with pytest.raises(ManiSkillSetupError, match="one batch of envs in one env worker"):
        cls(sim_backend="physx_cuda")


def test_bad_options_are_refused_before_building():
    cls = ENVS.resolve("ManiSkill-PickCube-v1")
    with pytest.raises(ValueError, match="image_size"):
        cls(image_size=4)
    with pytest.raises(ValueError, match="obs_mode"):
        cls(obs_mode="depth")
    with pytest.raises(ValueError, match=r"cameras must name one or two of the task's cameras \['base_camera'\]"):
        camera_map(["base_camera"], ["hand_camera"], "ManiSkill-PickCube-v1")
    assert camera_map(["base_camera", "hand_camera"], None, "x") == {"main_images": "base_camera",
                                                                    "wrist_images": "hand_camera"}

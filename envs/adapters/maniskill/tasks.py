"""ManiSkill3's tasks as embodied env ids: ``ManiSkill-<ManiSkill's id>`` (``ManiSkill-PickCube-v1``).

``TASKS`` lists every task mani-skill 3.0.1 registers, with its registered episode cap and, for those that cannot
build from the wheel alone, the ManiSkill asset ids it needs (``python -m mani_skill.utils.download_asset ID``
fetches one) or the package it imports. The table is static so that ``embodied list envs`` lists the suite
without importing ManiSkill (seconds: torch, SAPIEN); ``tests/envs/adapters/test_maniskill.py`` checks it
against the installed ManiSkill's registry. Each id's env class (a ``ManiSkillEnv`` subclass) is made on first use
by ``classes``, as the entry points in ``pyproject.toml`` name them (``classes:ManiSkill_PickCube_v1``).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass

PREFIX = "ManiSkill-"
DOWNLOAD = "python -m mani_skill.utils.download_asset"


@dataclass(frozen=True)
class Task:
    """One ManiSkill task as an embodied env id."""

    maniskill_id: str  # ManiSkill's own id, e.g. PickCube-v1
    max_steps: int  # its registered episode cap
    assets: tuple[str, ...] = ()  # ManiSkill asset ids it needs downloaded (not in the wheel)
    package: str = ""  # a Python package it imports that mani-skill does not install

    @property
    def env_id(self) -> str:
        return PREFIX + self.maniskill_id

    @property
    def class_name(self) -> str:
        """Its env class's name, what the entry point names: ``ManiSkill_PickCube_v1``."""
        return re.sub(r"\W", "_", self.env_id)

    @property
    def description(self) -> str:
        """A task description from the id: ``PickCube-v1`` -> ``pick cube``."""
        name = self.maniskill_id.rsplit("-v", 1)[0].removeprefix("MS-").replace("_", " ").replace("-", " ")
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()


def _t(maniskill_id: str, max_steps: int, *assets: str, package: str = "") -> Task:
    return Task(maniskill_id, max_steps, tuple(assets), package)


# mani-skill 3.0.1's registry (REGISTERED_ENVS): ids, caps, and what a fresh install lacks (measured by building
# each on physx_cpu with no asset folder: ManiSkill asks to download these, or fails naming them).
TASKS: tuple[Task, ...] = (
    # table-top manipulation, built from the wheel
    _t("PickCube-v1", 50), _t("PushCube-v1", 50), _t("PullCube-v1", 50), _t("StackCube-v1", 50),
    _t("PegInsertionSide-v1", 100), _t("PlugCharger-v1", 200), _t("LiftPegUpright-v1", 50), _t("PokeCube-v1", 50),
    _t("PushT-v1", 100), _t("RollBall-v1", 80), _t("PlaceSphere-v1", 50), _t("PullCubeTool-v1", 100),
    _t("StackPyramid-v1", 250), _t("TwoRobotPickCube-v1", 100), _t("TwoRobotStackCube-v1", 100),
    _t("PickCubeSO100-v1", 50), _t("SO100GraspCube-v1", 64), _t("DrawTriangle-v1", 300), _t("Empty-v1", 200000),
    _t("TableTopFreeDraw-v1", 1000), _t("FMBAssembly1Easy-v1", 500),
    # dexterous hands
    _t("RotateValveLevel0-v1", 80), _t("RotateValveLevel1-v1", 150), _t("RotateValveLevel2-v1", 150),
    _t("RotateValveLevel3-v1", 150), _t("RotateValveLevel4-v1", 300),
    _t("RotateSingleObjectInHandLevel0-v1", 300), _t("RotateSingleObjectInHandLevel1-v1", 300),
    _t("TriFingerRotateCubeLevel0-v1", 250), _t("TriFingerRotateCubeLevel1-v1", 250),
    _t("TriFingerRotateCubeLevel2-v1", 250), _t("TriFingerRotateCubeLevel3-v1", 250),
    _t("TriFingerRotateCubeLevel4-v1", 250),
    # control (MS-*: DeepMind-control-like)
    _t("MS-AntRun-v1", 1000), _t("MS-AntWalk-v1", 1000), _t("MS-CartpoleBalance-v1", 1000),
    _t("MS-CartpoleSwingUp-v1", 1000), _t("MS-HopperHop-v1", 600), _t("MS-HopperStand-v1", 600),
    _t("MS-HumanoidRun-v1", 1000), _t("MS-HumanoidStand-v1", 1000), _t("MS-HumanoidWalk-v1", 1000),
    # need a download (robots, objects, scenes) or a package
    _t("PickSingleYCB-v1", 50, "ycb"), _t("PickClutterYCB-v1", 100, "ycb", "pick_clutter_ycb_configs"),
    _t("RotateSingleObjectInHandLevel2-v1", 300, "ycb"), _t("RotateSingleObjectInHandLevel3-v1", 300, "ycb"),
    _t("OpenCabinetDoor-v1", 100, "partnet_mobility_cabinet"),
    _t("OpenCabinetDrawer-v1", 100, "partnet_mobility_cabinet"),
    _t("TurnFaucet-v1", 200, "partnet_mobility_faucet"), _t("AssemblingKits-v1", 200, "assembling_kits"),
    _t("InsertFlower-v1", 300, "oakink-v2"), _t("PickCubeWidowXAI-v1", 50, "widowxai"),
    _t("AnymalC-Reach-v1", 200, "anymal_c"), _t("AnymalC-Spin-v1", 200, "anymal_c"),
    _t("UnitreeGo2-Reach-v1", 200, "unitree_go2"), _t("UnitreeG1Stand-v1", 1000, "unitree_g1"),
    _t("UnitreeG1PlaceAppleInBowl-v1", 100, "unitree_g1"), _t("UnitreeG1TransportBox-v1", 100, "unitree_g1"),
    _t("UnitreeH1Stand-v1", 1000, "unitree_h1"),
    _t("PutCarrotOnPlateInScene-v1", 60, "bridge_v2_real2sim", "widowx250s"),
    _t("PutEggplantInBasketScene-v1", 120, "bridge_v2_real2sim", "widowx250s"),
    _t("PutSpoonOnTableClothInScene-v1", 60, "bridge_v2_real2sim", "widowx250s"),
    _t("StackGreenCubeOnYellowCubeBakedTexInScene-v1", 60, "bridge_v2_real2sim", "widowx250s"),
    _t("SceneManipulation-v1", 200, "ReplicaCAD"), _t("ReplicaCAD_SceneManipulation-v1", 200, "ReplicaCAD"),
    *(_t(f"ReplicaCAD{name}_SceneManipulation-v1", 200, "ReplicaCAD", "ReplicaCADRearrange")
      for name in ("PrepareGroceriesTrain", "PrepareGroceriesVal", "SetTableTrain", "SetTableVal", "TidyHouseTrain",
                   "TidyHouseVal")),
    _t("ArchitecTHOR_SceneManipulation-v1", 200, "AI2THOR"), _t("RoboCasaKitchen-v1", 100, "RoboCasa"),
    _t("DrawSVG-v1", 500, package="svgpathtools"),
)
BY_ENV_ID: dict[str, Task] = {t.env_id: t for t in TASKS}
BY_CLASS: dict[str, Task] = {t.class_name: t for t in TASKS}


def task_for(env_id: str) -> Task:
    """The task of an embodied id (``ManiSkill-PickCube-v1``) or of ManiSkill's own (``PickCube-v1``)."""
    task = BY_ENV_ID.get(env_id) or BY_ENV_ID.get(PREFIX + env_id)
    if task is None:
        raise ValueError(f"unknown ManiSkill task {env_id!r}; the ids are {', '.join(BY_ENV_ID)}")
    return task


def missing_assets(task: Task) -> str:
    """"" if ``task`` can build here, else what it lacks and how to get it (ManiSkill's download command)."""
    if task.package and importlib.util.find_spec(task.package) is None:
        return (f"{task.env_id} imports {task.package}, which mani-skill does not install: pip install "
                f"{task.package}")
    missing = [a for a in task.assets if not _downloaded(a)]
    if not missing:
        return ""
    return (f"{task.env_id} needs ManiSkill assets that are not downloaded: {', '.join(missing)}; fetch them with "
            f"{'; '.join(f'{DOWNLOAD} {a}' for a in missing)} (into MS_ASSET_DIR, default ~/.maniskill/data)")


@functools.cache
def _downloaded(asset: str) -> bool:
    if importlib.util.find_spec("mani_skill") is None:
        return False
    from mani_skill.utils.assets import data  # (imports torch and SAPIEN: asked only of tasks that need assets)

    ids = data.expand_data_group_into_individual_data_source_ids(asset) if asset in data.DATA_GROUPS else [asset]
    return all(data.is_data_source_downloaded(i) for i in ids)

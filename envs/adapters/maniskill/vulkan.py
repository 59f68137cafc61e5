"""Which Vulkan driver ManiSkill's renderer (SAPIEN) uses, chosen before SAPIEN is imported.

Every ManiSkill task builds a SAPIEN render system, even with ``obs_mode: state``, so a Vulkan driver is needed
everywhere. In order of preference:

1. ``VK_ICD_FILENAMES`` (or ``VK_DRIVER_FILES``) already set: the user's choice, left alone;
2. a GPU driver's manifest in the system's ICD folders (NVIDIA's, or any other but lavapipe): left to the loader;
3. the private lavapipe that ``make`` unpacks under ``.vulkan/`` (``.ci/vulkan-driver.sh``; Mesa 25 from Debian's
   bookworm-backports, since Debian 12's own lavapipe lacks a feature SAPIEN needs): named in ``VK_ICD_FILENAMES``
   for this process and the processes it starts, the system's Mesa untouched;
4. the system's own lavapipe, which may be too old (SAPIEN then refuses it: ``ManiSkillSetupError`` says so).

``EMBODIED_VULKAN_DIR`` names another folder than ``<repository>/.vulkan`` (a non-editable install).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ICD_DIRS: tuple[str, ...] = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
MANIFEST = "lvp_icd.json"  # what .ci/vulkan-driver.sh writes
FIX = ("run `make setup` (or `bash .ci/vulkan-driver.sh`), which unpacks Mesa's lavapipe (Debian package "
       "mesa-vulkan-drivers, bookworm-backports on Debian 12) under .vulkan/ without touching the system's Mesa; "
       "or install a GPU's Vulkan driver; or name a driver's manifest in VK_ICD_FILENAMES")


class ManiSkillSetupError(RuntimeError):
    """ManiSkill cannot run here: a missing package, Vulkan driver, asset or sim backend, with the fix."""


@dataclass(frozen=True)
class VulkanDriver:
    """The driver chosen for this process."""

    source: str  # "environment", "system GPU", "private lavapipe", "system" or "none"
    manifest: str  # the ICD manifest's path ("" when the loader searches the system's folders)
    version: str  # the private driver's package version, else ""


def private_dir() -> Path:
    """Where ``make`` unpacks the private driver: ``EMBODIED_VULKAN_DIR`` or ``<repository>/.vulkan``."""
    named = os.environ.get("EMBODIED_VULKAN_DIR")
    return Path(named) if named else Path(__file__).resolve().parents[3] / ".vulkan"


def system_manifests() -> list[Path]:
    """The ICD manifests the Vulkan loader would find by itself."""
    return sorted(p for d in ICD_DIRS if Path(d).is_dir() for p in Path(d).glob("*.json"))


def choose_driver() -> VulkanDriver:
    """Pick the driver (the module docstring's order) and name it in the environment where it is the private one.

    Called before SAPIEN is imported: the loader reads ``VK_ICD_FILENAMES`` once, when SAPIEN starts it."""
    manifest = private_dir() / MANIFEST
    for var in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):
        if os.environ.get(var) and os.environ[var] != str(manifest):  # (ours, named by an earlier call: below)
            return VulkanDriver("environment", os.environ[var], "")
    gpu = [p for p in system_manifests() if "lvp" not in p.name]
    if gpu:
        return VulkanDriver("system GPU", str(gpu[0]), "")
    if manifest.is_file():
        os.environ["VK_ICD_FILENAMES"] = str(manifest)
        try:
            version = str(json.loads(manifest.read_text()).get("embodied", {}).get("version", ""))
        except (OSError, ValueError):
            version = ""
        return VulkanDriver("private lavapipe", str(manifest), version)
    system = system_manifests()
    return VulkanDriver("system", str(system[0]), "") if system else VulkanDriver("none", "", "")


def explain(driver: VulkanDriver, error: BaseException) -> str:
    """Why Vulkan did not start (SAPIEN's ``error``), what is missing and how to get it."""
    if driver.source == "none":
        what = (f"no Vulkan driver: no manifest in {', '.join(ICD_DIRS)} and no private driver at "
                f"{private_dir() / MANIFEST}")
    elif driver.source == "system":
        what = (f"the system's Vulkan driver ({driver.manifest}) was refused; Debian 12's lavapipe (Mesa 22.3) lacks "
                f"descriptorBindingPartiallyBound, which SAPIEN needs")
    else:
        what = f"the Vulkan driver chosen ({driver.source}: {driver.manifest}) did not start"
    return (f"ManiSkill needs a Vulkan driver to build any task, even with obs_mode state: {what} (SAPIEN: "
            f"{error}). Fix: {FIX}")

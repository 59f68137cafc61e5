"""What both ManiSkill paths share (the per-env ``env.ManiSkillEnv`` and the CUDA batch ``batched``): importing
ManiSkill after the Vulkan driver is chosen, ``gym.make`` of a task with each failure said as what is missing and the
fix, the constructor's own checks, and the conversions of ManiSkill's tensors for snapshots."""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from embodied.envs.adapters.maniskill.observations import maniskill_obs_mode
from embodied.envs.adapters.maniskill.tasks import Task, missing_assets
from embodied.envs.adapters.maniskill.vulkan import ManiSkillSetupError, VulkanDriver, choose_driver, explain

EXTRA = "pip install 'embodied[maniskill]' (make setup installs it)"
MIN_IMAGE, MAX_IMAGE = 16, 1024
RewardMode = Literal["sparse", "dense", "normalized_dense"]
SimBackend = Literal["auto", "physx_cpu", "physx_cuda"]


@functools.cache
def import_maniskill() -> VulkanDriver:
    """Choose the Vulkan driver, then import ``mani_skill.envs`` (which registers the tasks with gymnasium)."""
    driver = choose_driver()  # before SAPIEN reads VK_ICD_FILENAMES
    try:
        with warnings.catch_warnings():  # SAPIEN warns that it uses its own Vulkan loader: what is meant here
            warnings.filterwarnings("ignore", message=".*libvulkan.*")
            importlib.import_module("mani_skill.envs")
    except ImportError as err:
        raise ManiSkillSetupError(f"the ManiSkill envs need mani-skill: {EXTRA} ({err})") from err
    return driver


def cuda_available() -> bool:
    """Whether this process can use CUDA (torch is ManiSkill's own dependency)."""
    import torch

    return torch.cuda.is_available()


def make_maniskill(task: Task, obs_mode: str, num_envs: int, sim_backend: str, max_episode_steps: int,
                   render_mode: str | None, reward_mode: str | None, control_mode: str | None,
                   image_size: int) -> gym.Env:
    """``gym.make`` of a ManiSkill task, each failure said as what is missing and the fix."""
    missing = missing_assets(task)
    if missing:
        raise ManiSkillSetupError(missing)
    driver = import_maniskill()
    from mani_skill.utils.registration import REGISTERED_ENVS

    supported = list(getattr(REGISTERED_ENVS[task.maniskill_id].cls, "SUPPORTED_REWARD_MODES", ()) or ())
    if reward_mode is not None and supported and reward_mode not in supported:
        raise ValueError(f"env.kwargs.reward_mode: {task.env_id} supports {supported}, got {reward_mode!r}")
    size = {"width": image_size, "height": image_size}
    options = {"reward_mode": reward_mode} if reward_mode is not None else {}
    options |= {"control_mode": control_mode} if control_mode is not None else {}
    # Without CUDA SAPIEN renders on the CPU driver; asking for it spares ManiSkill's warning that it fell back.
    options |= {} if cuda_available() else {"render_backend": "cpu"}
    try:
        return gym.make(task.maniskill_id, obs_mode=maniskill_obs_mode(obs_mode), num_envs=num_envs,
                        sim_backend=sim_backend, render_mode=render_mode, max_episode_steps=max_episode_steps,
                        sensor_configs=size, human_render_camera_configs=size, **options)
    except RuntimeError as err:
        if "vk::" in str(err) or "Vulkan" in str(err) or "vulkan" in str(err):
            raise ManiSkillSetupError(explain(driver, err)) from err
        raise


def check_options(task: Task, obs_mode: str, image_size: int, render_mode: str | None) -> None:
    """The constructor's own checks, before anything is built."""
    if obs_mode not in ("state", "rgb", "state+rgb"):
        raise ValueError(f"env.obs_mode: {obs_mode!r} is not one of state, rgb, state+rgb")
    if not isinstance(image_size, int) or not MIN_IMAGE <= image_size <= MAX_IMAGE:
        raise ValueError(f"env.kwargs.image_size: {task.env_id}'s cameras render {MIN_IMAGE}..{MAX_IMAGE} px, "
                         f"got {image_size!r}")
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"{task.env_id}: render_mode must be None or 'rgb_array', got {render_mode!r}")


def to_numpy(value: Any) -> Any:
    """ManiSkill's tensors (nested in dicts) as numpy arrays on the host."""
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value.cpu().numpy() if hasattr(value, "cpu") else value


def to_torch(value: Any, device: Any) -> Any:
    """``to_numpy``'s arrays (nested in dicts) back as tensors on ``device``."""
    import torch

    if isinstance(value, dict):
        return {k: to_torch(v, device) for k, v in value.items()}
    return torch.as_tensor(value, device=device)


def host_array(value: Any) -> np.ndarray:
    """A tensor (or array) as a numpy array on the host, batch first."""
    array = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
    return array.reshape(-1) if array.ndim == 0 else array

"""ManiSkill's observations in embodied's layout, for a batch of N envs (torch tensors, on the sim's device).

- ``state``: ManiSkill's ``obs_mode="state"`` vector (robot proprioception, privileged object poses, goal), float32
  [N, S], as its own PPO baseline trains on.
- ``rgb``: ManiSkill's ``obs_mode="rgb"``; ``main_images`` is the first camera of ``cameras`` and ``wrist_images``
  the second when given, uint8 [N, H, W, 3]. SAPIEN's sensor frames are upright already (nothing is turned).
- ``state+rgb``: the images, and ``states`` = ManiSkill's ``agent`` and ``extra`` entries of that rgb observation,
  flattened in its order (what its ``FlattenRGBDObservationWrapper`` calls the state: proprioception, TCP pose,
  goal; no privileged object state).

Which cameras: by default the task's sensor cameras in ManiSkill's order, with ``hand_camera`` (the wrist camera
of ``panda_wristcam``) as ``wrist_images`` wherever the task has it; ``cameras: [base_camera]`` keeps one.
"""

from __future__ import annotations

from typing import Any

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES

WRIST_CAMERA = "hand_camera"  # ManiSkill's name for the camera on panda_wristcam's hand


def maniskill_obs_mode(obs_mode: str) -> str:
    """The ``obs_mode`` ManiSkill is made with for one of ours."""
    return "state" if obs_mode == "state" else "rgb"


def camera_map(available: list[str], wanted: list[str] | None, where: str) -> dict[str, str]:
    """Our image keys -> ManiSkill camera names; ``wanted`` (at most two) must name cameras the task has."""
    if wanted is None:
        rest = [c for c in available if c != WRIST_CAMERA]
        wanted = rest[:1] + ([WRIST_CAMERA] if WRIST_CAMERA in available else rest[1:2])
    unknown = [c for c in wanted if c not in available]
    if unknown or not 1 <= len(wanted) <= 2:
        raise ValueError(f"{where}: env.kwargs.cameras must name one or two of the task's cameras {available} "
                         f"(main, then wrist), got {wanted}")
    return dict(zip((MAIN_IMAGES, WRIST_IMAGES), wanted))


def sensor_cameras(raw_env: Any) -> list[str]:
    """The task's sensor camera names, in ManiSkill's order."""
    return list(raw_env.unwrapped.scene.sensors.keys())


def to_layout(raw: Any, obs_mode: str, cameras: dict[str, str]) -> dict[str, Any]:
    """One batch of ManiSkill observations as ``{states, main_images, wrist_images}`` tensors [N, ...]."""
    import torch
    from mani_skill.utils.common import flatten_state_dict

    if obs_mode == "state":
        return {STATES: raw.to(torch.float32)}
    out = {key: raw["sensor_data"][camera]["rgb"] for key, camera in cameras.items()}
    if obs_mode == "state+rgb":
        parts = {k: v for k, v in raw.items() if k in ("agent", "extra")}
        out[STATES] = flatten_state_dict(parts, use_torch=True).to(torch.float32)
    return out

"""What a π0 folder is, read without torch: its ``config.json``, and the names of the tiny ones built offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embodied.policies.transformers_base.configuration import TINY_PREFIX

__all__ = ["CAMERA_SOURCES", "TINY_NAMES", "TINY_PREFIX", "camera_sources", "folder_max_length", "is_lerobot_config",
           "lerobot_cameras", "pi0_folder_problem", "read_config_json"]
TINY_NAMES = ("pi0-tiny",)


def read_config_json(path: Path) -> dict[str, Any] | None:
    """A folder's ``config.json`` as a dict (None when absent or unreadable)."""
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None


def pi0_folder_problem(path: Path) -> tuple[str | None, int | None]:
    """(what is wrong with ``path`` as a π0 folder or None, the chunk_size its config declares)."""
    where = f"policy.model_path: {str(path)!r}"
    if not path.is_dir():
        return f"{where} is not a folder (a PI0ForConditionalGeneration save_pretrained folder, a LeRobot π0 " \
               "folder, or tiny:pi0-tiny)", None
    config = read_config_json(path)
    if config is None:
        return f"{where} has no readable config.json", None
    kind = config.get("model_type") or config.get("type")
    field = "model_type" if "model_type" in config else "type"
    if kind == "pi05":
        return f"{where} is a π0.5, not a π0: its config.json says {field}='pi05' (use policy.type: pi05)", None
    if kind != "pi0":
        return (f"{where} is not a π0: its config.json says {field}={kind!r} (policy.type=vla reads "
                "image-text-to-text backbones)"), None
    return None, config.get("chunk_size", 50)


CAMERA_SOURCES = ("main_images", "wrist_images", "empty")  # embodied.core.types MAIN_IMAGES, WRIST_IMAGES; no camera
LEROBOT_MAX_LENGTH = 48  # LeRobot's π0 tokenizer_max_length default (openpi's)


LEROBOT_TYPES = ("pi0", "pi05")  # LeRobot policy types whose folders these readers know (π0's and π0.5's)


def is_lerobot_config(config: dict[str, Any]) -> bool:
    """A LeRobot π0 or π0.5 ``config.json`` (``"type": "pi0"`` or ``"pi05"``, no transformers ``model_type``)."""
    return config.get("type") in LEROBOT_TYPES and "model_type" not in config


def lerobot_cameras(config: dict[str, Any]) -> list[str]:
    """The image features of a LeRobot ``config.json``, in its order (the order its π0 puts cameras in), and the
    ``empty_cameras`` it adds after them (``observation.images.empty_camera_i``) where they are not listed."""
    features = config.get("input_features") or {}
    names = [name for name, f in features.items() if isinstance(f, dict) and f.get("type") == "VISUAL"]
    empty = [f"observation.images.empty_camera_{i}" for i in range(int(config.get("empty_cameras") or 0))]
    return names + [name for name in empty if name not in names]


def camera_sources(cameras: list[str] | None, use_wrist: bool, env_has_wrist: bool,
                   folder: dict[str, Any]) -> list[str]:
    """The env image for each of the model's cameras (``empty`` where the env has none), from ``policy.cameras`` or
    by default: main, then wrist (when used), then a LeRobot folder's remaining cameras empty. A mismatch between
    the folder's cameras and the env's raises, naming both."""
    env = ["main_images"] + (["wrist_images"] if use_wrist and env_has_wrist else [])
    model = lerobot_cameras(folder) if is_lerobot_config(folder) else []
    if cameras is None:
        if model and len(env) > len(model):
            raise ValueError(f"policy.cameras: the env gives {len(env)} cameras ({', '.join(env)}) but the folder's "
                             f"π0 takes {len(model)} ({', '.join(model)}); map them with policy.cameras or set "
                             "policy.use_wrist_image=false")
        return env + ["empty"] * (len(model) - len(env)) if model else env
    if model and len(cameras) != len(model):
        raise ValueError(f"policy.cameras: {len(cameras)} given ({', '.join(cameras)}) for the folder's "
                         f"{len(model)} cameras ({', '.join(model)}); give one env image (or empty) per camera")
    missing = [c for c in cameras if c == "wrist_images" and not env_has_wrist]
    if missing:
        raise ValueError(f"policy.cameras: {', '.join(cameras)} asks for wrist_images, but the env gives only "
                         "main_images (set env.obs_mode or the env's wrist camera, or map that camera to empty)")
    if all(c == "empty" for c in cameras):
        raise ValueError(f"policy.cameras: {cameras} maps no env image to any camera")
    return list(cameras)


def folder_max_length(folder: dict[str, Any]) -> int:
    """The prompt length a folder declares: a LeRobot π0's ``tokenizer_max_length``, else LeRobot's default."""
    if is_lerobot_config(folder) and isinstance(folder.get("tokenizer_max_length"), int):
        return folder["tokenizer_max_length"]
    return LEROBOT_MAX_LENGTH

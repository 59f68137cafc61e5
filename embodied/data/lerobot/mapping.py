"""Which LeRobot feature feeds which of embodied's keys (``states``, ``main_images``, ``wrist_images``, ``actions``).

``sft.features`` names them explicitly (``{main_images: observation.images.top}``); a key it
leaves out is looked up among ``KNOWN_NAMES`` (LIBERO's names first, then ALOHA's, embodied's own
writer's and a few others; docs/lerobot.md has the table), and a key set to null is not read.

A needed key none of whose names is present, or two of them (ambiguous), fails when it is needed,
listing the dataset's features with their dtypes and shapes; an explicit name the dataset lacks,
or a feature of the wrong kind, fails at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.data.lerobot.layout import Feature, LeRobotError, LeRobotInfo

ACTIONS = "actions"
KEYS = (STATES, MAIN_IMAGES, WRIST_IMAGES, ACTIONS)
KNOWN_NAMES: dict[str, tuple[str, ...]] = {
    STATES: ("observation.state", "state"),
    # LIBERO and embodied's writer, ALOHA, ALOHA sim, PushT, physical-intelligence/libero's plain names
    MAIN_IMAGES: ("observation.images.image", "observation.images.cam_high", "observation.images.top",
                  "observation.image", "image"),
    # LIBERO and embodied's writer, lerobot/libero, ALOHA, physical-intelligence/libero
    WRIST_IMAGES: ("observation.images.wrist_image", "observation.images.image2", "observation.images.cam_left_wrist",
                   "wrist_image"),
    ACTIONS: ("action", "actions"),
}
CAMERA_KEYS = (MAIN_IMAGES, WRIST_IMAGES)


@dataclass(frozen=True)
class Resolved:
    """What one key maps to: a feature, or why none (``problem``)."""

    key: str
    feature: Feature | None
    problem: str = ""  # "" when found or not asked for; else why not (missing or ambiguous)
    explicit: bool = False  # named in sft.features (None there: explicitly not read)


def resolve(info: LeRobotInfo, explicit: Mapping[str, str | None]) -> dict[str, Resolved]:
    """Every key's feature. A name given explicitly must exist (else ``LeRobotError``, at once);
    a looked-up key that is missing or ambiguous carries its ``problem`` until ``require`` asks for it."""
    unknown = sorted(set(explicit) - set(KEYS))
    if unknown:
        raise LeRobotError(f"sft.features: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    out = {}
    for key in KEYS:
        if key in explicit:
            out[key] = _explicit(info, key, explicit[key])
            continue
        found = [info.features[n] for n in KNOWN_NAMES[key] if n in info.features]
        if len(found) == 1:
            out[key] = Resolved(key, _checked(info, key, found[0]))
        elif found:
            out[key] = Resolved(key, None, f"ambiguous: the dataset has {', '.join(f.name for f in found)}")
        else:
            out[key] = Resolved(key, None, f"none of the usual names ({', '.join(KNOWN_NAMES[key])})")
    return out


def require(info: LeRobotInfo, resolved: Resolved) -> Feature:
    """The feature of a key that is needed; ``LeRobotError`` listing the dataset's features if it has none."""
    if resolved.feature is not None:
        return resolved.feature
    why = resolved.problem or "set to null in sft.features"
    raise LeRobotError(f"sft.features.{resolved.key}: no feature of {info.root} feeds {resolved.key} ({why}); "
                       f"name one with sft.features.{resolved.key}=FEATURE. Its features "
                       f"({info.root / 'meta/info.json'}):\n  {info.listing()}")


def _explicit(info: LeRobotInfo, key: str, name: str | None) -> Resolved:
    if name is None:
        return Resolved(key, None, "", explicit=True)
    if name not in info.features:
        raise LeRobotError(f"sft.features.{key}: {name!r} is not a feature of {info.root}; its features "
                           f"({info.root / 'meta/info.json'}):\n  {info.listing()}")
    return Resolved(key, _checked(info, key, info.features[name]), explicit=True)


def _checked(info: LeRobotInfo, key: str, feature: Feature) -> Feature:
    """The feature, if it can feed ``key``: a camera for images (not depth), a vector for states and actions."""
    where = f"sft.features.{key}: {feature.describe()} of {info.root}"
    if key in CAMERA_KEYS:
        if not feature.is_camera:
            raise LeRobotError(f"{where} is not a camera (dtype video or image)")
        if feature.is_depth:
            raise LeRobotError(f"{where} is a depth map; embodied's observations have no depth")
        if feature.image_shape[2] != 3:
            raise LeRobotError(f"{where} has {feature.image_shape[2]} channels, {key} are RGB")
    elif feature.is_camera or len(feature.shape) != 1 or feature.dtype in ("string", "bool"):
        raise LeRobotError(f"{where} is not a vector of numbers (dtype float32 or similar, shape (n,))")
    return feature

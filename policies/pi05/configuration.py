"""Configuration of π0.5 (``policy.type: pi05``): π0's fields, π0.5's defaults, its normalisation and its folders.

``policy.model_path`` is a LeRobot π0.5 folder (its ``config.json`` says ``"type": "pi05"``; config translated,
keys mapped, statistics and processor settings read, ``pretrained.py``), a folder this policy saved
(``"model_type": "pi05"``), or ``tiny:pi05-tiny`` (built offline). A π0 folder is refused here, and a π0.5 one
by ``policy.type: pi0``, each naming the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.folders import read_config_json

TINY_NAMES = ("pi05-tiny",)
PI05_TYPE = "pi05"
LEROBOT_MAX_LENGTH = 200  # LeRobot's π0.5 tokenizer_max_length default (openpi's)
LEROBOT_MODES = {"QUANTILES": "quantiles", "MEAN_STD": "mean_std"}  # LeRobot's NormalizationMode names


def folder_mode(config: dict[str, Any]) -> str | None:
    """The normalisation a LeRobot π0.5 ``config.json`` names for actions (its ``normalization_mapping``)."""
    name = (config.get("normalization_mapping") or {}).get("ACTION")
    return LEROBOT_MODES.get(name, name.lower()) if isinstance(name, str) else None


def pi05_folder_problem(path: Path) -> tuple[str | None, int | None]:
    """(what is wrong with ``path`` as a π0.5 folder or None, the chunk_size its config declares)."""
    where = f"policy.model_path: {str(path)!r}"
    if not path.is_dir():
        return f"{where} is not a folder (a LeRobot π0.5 folder, a folder policy.type=pi05 saved, or " \
               "tiny:pi05-tiny)", None
    config = read_config_json(path)
    if config is None:
        return f"{where} has no readable config.json", None
    field = "model_type" if "model_type" in config else "type"
    kind = config.get(field)
    if kind == "pi0":
        return f"{where} is a π0, not a π0.5: its config.json says {field}='pi0' (use policy.type: pi0)", None
    if kind != PI05_TYPE:
        return f"{where} is not a π0.5: its config.json says {field}={kind!r}", None
    return None, config.get("chunk_size", 50)


def folder_max_length(folder: dict[str, Any]) -> int:
    """The prompt length a folder declares (LeRobot's ``tokenizer_max_length``), else LeRobot's π0.5 default."""
    value = folder.get("tokenizer_max_length")
    return value if isinstance(value, int) else LEROBOT_MAX_LENGTH


@dataclass
class PI05PolicyConfig(PI0PolicyConfig):
    """π0's fields (cameras, prompt length, statistics file, Euler steps, freezing; see ``PI0PolicyConfig``) with
    π0.5's defaults, and the normalisation mode. The state is written into the prompt (``use_states``), not into
    the expert; ``max_instruction_tokens`` is the whole text prompt's length (LeRobot's ``tokenizer_max_length``)."""

    type: str = "pi05"  # registered policy name
    model_path: str = "tiny:pi05-tiny"  # (TransformersPolicyConfig's field) a LeRobot π0.5 folder, a saved pi05 folder, or tiny:pi05-tiny
    use_states: bool = True  # (TransformersPolicyConfig's field) the normalised state, discretised into the prompt (an empty state when false)
    flow_logprob: Literal["sde", "noise"] = "noise"  # (TransformersPolicyConfig's field) π0.5's RL log-probs: Flow-Noise by default
    normalization: Literal["quantiles", "mean_std"] | None = None  # state/action normalisation (null: the folder's normalization_mapping, else quantiles)

    model_class: ClassVar[str] = "embodied.policies.pi05.modeling:PI05Policy"
    folder_kind: ClassVar[Any] = staticmethod(pi05_folder_problem)
    pretrained_module: ClassVar[str] = "embodied.policies.pi05.pretrained"
    processing_module: ClassVar[str] = "embodied.policies.pi05.processing"
    tiny_names: ClassVar[tuple[str, ...]] = TINY_NAMES
    make_tiny: ClassVar[str] = "embodied.policies.pi05.pretrained:make_tiny"
    model_noun: ClassVar[str] = "π0.5"

    def validate(self) -> list[str]:
        """π0's checks (the folder, LoRA, the device, the flow fields, cameras, prompt length) and π0.5's."""
        p = super().validate()
        if self.normalization not in (None, "quantiles", "mean_std"):
            p.append(f"policy.normalization: {self.normalization!r}; known: quantiles, mean_std (null: the folder's)")
        return p

    def folder_stats_args(self, config: dict[str, Any]) -> tuple[Any, ...]:
        """The mode the folder's statistics are read in: ``policy.normalization``, else the folder's, else quantiles."""
        return (self.normalization or folder_mode(config) or "quantiles",)

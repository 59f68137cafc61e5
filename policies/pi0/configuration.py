"""Configuration of π0 as transformers ships it (``policy.type: pi0``).

``policy.model_path`` is a folder of ``PI0ForConditionalGeneration`` in transformers' own format, a
LeRobot π0 folder (its ``config.json`` says ``"type": "pi0"``; the weights go through transformers'
conversion mapping and the config is translated, ``pretrained.py``), or ``tiny:pi0-tiny`` (built
offline, ``tiny.py``). What the model predicts is a chunk of ``chunk_size`` actions padded to
``max_action_dim``; the env executes the first ``policy.action_chunk`` of them, in its own dimensions.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from embodied.policies.pi0.folders import (CAMERA_SOURCES, TINY_NAMES, camera_sources, is_lerobot_config,
                                           pi0_folder_problem, read_config_json)
from embodied.policies.transformers_base.configuration import FLOW_LOGPROBS, TINY_PREFIX, TransformersPolicyConfig
from embodied.policy.config import PolicySpec

__all__ = ["FLOW_LOGPROBS", "PI0PolicyConfig", "TINY_NAMES", "TINY_PREFIX", "size_problems"]


@dataclass
class PI0PolicyConfig(TransformersPolicyConfig):
    """π0's own fields; device, dtype, LoRA, the value head, checkpointing, the wrist camera, states and the
    flow log-prob fields are ``TransformersPolicyConfig``'s (LoRA here: the VLM's language model and the action
    expert; checkpointing: the vision tower's layers only, since the cache path cannot be)."""

    type: str = "pi0"  # registered policy name
    model_path: str = "tiny:pi0-tiny"  # (TransformersPolicyConfig's field) a transformers PI0 folder, a LeRobot π0 folder, or tiny:pi0-tiny
    use_states: bool = True  # (TransformersPolicyConfig's field) the normalized state enters the action expert (zeros when false)
    flow_logprob: Literal["sde", "noise"] = "noise"  # (TransformersPolicyConfig's field) π0's RL log-probs: Flow-Noise by default
    tokenizer_path: str | None = None  # folder with PaliGemma's tokenizer, for a model folder without one (LeRobot's)
    init_vlm_from: str | None = None  # PaliGemma folder (a tokens-head SFT run's policy/backbone) whose weights start the VLM
    norm_stats: str | None = None  # JSON of state/action mean and std; null: the model folder's, else the env's bounds
    flow_steps: int | None = None  # Euler denoising steps per chunk (null: the checkpoint's num_inference_steps)
    cameras: list[str] | None = None  # the env image for each of the model's cameras, in its order: main_images, wrist_images or empty (null: main, then wrist when use_wrist_image; a LeRobot folder's other cameras empty)
    max_cameras: int = 3  # cameras the prompt may hold (π0 was trained with up to 3: base and two wrists)
    max_instruction_tokens: int | None = None  # prompt tokens after the images (<bos>, instruction, newline), truncated and padded to it (LeRobot's tokenizer_max_length; null: the folder's, else 48)
    freeze_vlm: bool = False  # train the action expert, projections and heads only (RLinf's train_expert_only)
    freeze_vision: bool = False  # keep the SigLIP tower and projector fixed (LeRobot's freeze_vision_encoder)

    model_class: ClassVar[str] = "embodied.policies.pi0.modeling:PI0Policy"
    folder_kind: ClassVar[Any] = staticmethod(pi0_folder_problem)  # (what is wrong with a folder, its chunk_size)
    pretrained_module: ClassVar[str] = "embodied.policies.pi0.pretrained"  # resolve_model_path (imported when used)
    processing_module: ClassVar[str] = "embodied.policies.pi0.processing"  # load_stats, folder_stats (the same)
    architecture_fields: ClassVar[tuple[str, ...]] = ("use_states",)
    tiny_names: ClassVar[tuple[str, ...]] = TINY_NAMES
    make_tiny: ClassVar[str] = "embodied.policies.pi0.pretrained:make_tiny"
    model_noun: ClassVar[str] = "π0"

    @classmethod
    def folder_defaults(cls, section: dict[str, Any]) -> dict[str, Any]:
        """A LeRobot folder's ``n_action_steps`` (the actions it executes of each chunk) for ``action_chunk``."""
        path = section.get("model_path")
        if not isinstance(path, str) or path.startswith(TINY_PREFIX):
            return {}
        config = read_config_json(Path(path).expanduser()) or {}
        if not is_lerobot_config(config) or not isinstance(config.get("n_action_steps"), int):
            return {}
        return {"action_chunk": config["n_action_steps"]}

    def flow_noise(self) -> bool:
        """π0's chunks come from its flow's Euler loop (DSRL steers its initial noise)."""
        return True

    def folder_problems(self, path: Path) -> list[str]:
        """The folder is a π0 (π0.5: ``folder_kind``) whose chunks hold ``policy.action_chunk`` actions."""
        problem, chunk_size = self.folder_kind(path)
        if problem:
            return [problem]
        if chunk_size is not None and self.action_chunk > chunk_size:
            return [f"policy.action_chunk: {self.action_chunk} executed actions, but the checkpoint predicts chunks "
                    f"of {chunk_size} (its chunk_size)"]
        return []

    def validate(self) -> list[str]:
        """The shared checks (the folder is a π0, LoRA, the device, the flow log-prob fields), then π0's."""
        p = super().validate()
        if self.tokenizer_path is not None and not Path(self.tokenizer_path).expanduser().is_dir():
            p.append(f"policy.tokenizer_path: {self.tokenizer_path!r} is not a folder")
        if self.init_vlm_from is not None:
            config = read_config_json(Path(self.init_vlm_from).expanduser())
            if config is None or config.get("model_type") != "paligemma":
                p.append(f"policy.init_vlm_from: {self.init_vlm_from!r} is not a PaliGemma save_pretrained folder (a "
                         "tokens-head SFT run on tiny:paligemma-tiny has one at checkpoints/iter_N/policy/backbone)")
        if self.norm_stats is not None and not Path(self.norm_stats).expanduser().is_file():
            p.append(f"policy.norm_stats: {self.norm_stats!r} is not a file")
        if self.flow_steps is not None and self.flow_steps < 1:
            p.append(f"policy.flow_steps: must be >= 1 Euler step, got {self.flow_steps}")
        if self.max_cameras < 1:
            p.append(f"policy.max_cameras: must be >= 1, got {self.max_cameras}")
        if self.cameras is not None and (not self.cameras or any(c not in CAMERA_SOURCES for c in self.cameras)):
            p.append(f"policy.cameras: {self.cameras!r}: give one of {', '.join(CAMERA_SOURCES)} per camera of the "
                     "model, in its order")
        if self.max_instruction_tokens is not None and self.max_instruction_tokens < 2:
            p.append(f"policy.max_instruction_tokens: must be >= 2 (<bos> and a token), got {self.max_instruction_tokens}")
        return p

    def spec_problems(self, spec: PolicySpec) -> list[str]:
        """The env's action and state dimensions against the checkpoint's ``max_action_dim`` / ``max_state_dim``, its
        cameras against ``policy.max_cameras``, and the normalization statistics' sizes against the env's; read from
        the checkpoint's ``config.json`` and statistics file, without loading weights."""
        folder = self.model_folder()
        config = read_config_json(folder) or {}
        where = f"policy.model_path {self.model_path!r}"
        p = size_problems(self, spec, int(config.get("max_action_dim", 32)), int(config.get("max_state_dim", 32)),
                          where, config)
        try:
            stats, source = self.given_stats(folder, config, where)
            if stats is not None:
                stats.check(spec.state_dim if self.use_states else 0, spec.action_dim, source)
        except (OSError, ValueError, KeyError) as exc:
            p.append(str(exc))
        return p


    def model_folder(self) -> Path:
        """``policy.model_path`` as a folder (``tiny:NAME`` built into the cache)."""
        return importlib.import_module(self.pretrained_module).resolve_model_path(self.model_path)

    def folder_stats_args(self, config: dict[str, Any]) -> tuple[Any, ...]:
        """What the processing module's ``folder_stats`` takes after the folder (π0: nothing; π0.5: the mode)."""
        return ()

    def given_stats(self, folder: Path, config: dict[str, Any], where: str) -> tuple[Any, str]:
        """(the statistics ``policy.norm_stats`` or the folder gives, or None; where they came from)."""
        processing = importlib.import_module(self.processing_module)
        if self.norm_stats:
            return (processing.load_stats(Path(self.norm_stats).expanduser(), f"policy.norm_stats {self.norm_stats}"),
                    "policy.norm_stats")
        return processing.folder_stats(folder, *self.folder_stats_args(config)), where


def size_problems(config: PI0PolicyConfig, spec: PolicySpec, max_action_dim: int, max_state_dim: int,
                  where: str, folder: dict[str, Any]) -> list[str]:
    """What of the env does not fit a π0 of these padded dimensions, the folder's cameras (its ``config.json``,
    ``folder``) or ``policy.max_cameras``."""
    p: list[str] = []
    if spec.image_shape is None:
        p.append(f"policy.type={config.type} needs images: set env.obs_mode to 'rgb' or 'state+rgb'")
    if spec.action_dim > max_action_dim:
        p.append(f"env action dimension {spec.action_dim} exceeds max_action_dim {max_action_dim} of {where}")
    state_dim = spec.state_dim if config.use_states else 0
    if state_dim > max_state_dim:
        p.append(f"env state dimension {state_dim} exceeds max_state_dim {max_state_dim} of {where} (or set "
                 "policy.use_states=false)")
    try:
        sources = camera_sources(config.cameras, config.use_wrist_image, spec.wrist_image_shape is not None, folder)
    except ValueError as exc:
        return p + [str(exc)]
    cameras = [c for c in sources if c != "empty"]
    if len(cameras) > config.max_cameras:
        p.append(f"policy.max_cameras: the env gives {len(cameras)} cameras ({', '.join(cameras)}), more than "
                 f"{config.max_cameras}; raise it or set policy.use_wrist_image=false")
    return p

"""Configuration of π0 as transformers ships it (``policy.type: pi0``).

``policy.model_path`` is a folder of ``PI0ForConditionalGeneration`` in transformers' own format, a
LeRobot π0 folder (its ``config.json`` says ``"type": "pi0"``; the weights go through transformers'
conversion mapping and the config is translated, ``pretrained.py``), or ``tiny:pi0-tiny`` (built
offline, ``tiny.py``). What the model predicts is a chunk of ``chunk_size`` actions padded to
``max_action_dim``; the env executes the first ``policy.action_chunk`` of them, in its own dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from embodied.policies.pi0.folders import (CAMERA_SOURCES, TINY_NAMES, TINY_PREFIX, camera_sources,
                                           is_lerobot_config, pi0_folder_problem, read_config_json)
from embodied.policy_config import PolicyConfig, PolicySpec

FLOW_LOGPROBS = ("sde", "noise")


@dataclass
class PI0PolicyConfig(PolicyConfig):
    type: str = "pi0"  # registered policy name
    model_path: str = "tiny:pi0-tiny"  # transformers PI0 folder, LeRobot π0 folder, or tiny:pi0-tiny (built offline)
    tokenizer_path: str | None = None  # folder with PaliGemma's tokenizer, for a model folder without one (LeRobot's)
    init_vlm_from: str | None = None  # PaliGemma folder (a tokens-head SFT run's policy/backbone) whose weights start the VLM
    norm_stats: str | None = None  # JSON of state/action mean and std; null: the model folder's, else the env's bounds
    flow_steps: int | None = None  # Euler denoising steps per chunk (null: the checkpoint's num_inference_steps)
    flow_logprob: Literal["sde", "noise"] = "noise"  # RL log-probs: Flow-SDE (one noisy step) or Flow-Noise (every step)
    flow_noise_level: float = 0.5  # sde: a in sigma_t = a * sqrt(t / (1 - t))
    flow_noise_std_min: float = 0.08  # noise: lower bound of the learned std (normalized action units)
    flow_noise_std_max: float = 0.16  # noise: upper bound of the learned std
    use_wrist_image: bool = True  # the wrist camera is a second π0 camera when the env has one (when cameras is null)
    cameras: list[str] | None = None  # the env image for each of the model's cameras, in its order: main_images, wrist_images or empty (null: main, then wrist; a LeRobot folder's other cameras empty)
    use_states: bool = True  # the normalized proprioceptive state enters the action expert (zeros when false)
    max_cameras: int = 3  # cameras the prompt may hold (π0 was trained with up to 3: base and two wrists)
    max_instruction_tokens: int | None = None  # prompt tokens after the images (<bos>, instruction, newline), truncated and padded to it (LeRobot's tokenizer_max_length; null: the folder's, else 48)
    value_hidden: int = 256  # width of the value head's hidden layer
    lora_rank: int = 0  # LoRA rank through peft on the VLM's language model and the action expert; 0 trains all
    lora_alpha: float = 16.0  # LoRA scaling numerator (scale = alpha / rank)
    freeze_vlm: bool = False  # train the action expert, projections and heads only (RLinf's train_expert_only)
    freeze_vision: bool = False  # keep the SigLIP tower and projector fixed (LeRobot's freeze_vision_encoder)
    device: Literal["cpu", "cuda", "auto"] = "cpu"  # where the rollout and actor copies run (auto: cuda when present)
    dtype: Literal["float32", "bfloat16"] = "float32"  # weights and activations (heads and log-probs stay float32)
    gradient_checkpointing: bool = False  # recompute the vision tower's layers in backward (the cache path cannot be)

    model_class: ClassVar[str] = "embodied.policies.pi0.modeling:PI0Policy"
    architecture_fields: ClassVar[tuple[str, ...]] = ("use_states",)

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

    def required_observations(self) -> set[str]:
        return {"images", "states"} if self.use_states else {"images"}

    def validate(self) -> list[str]:
        """Checks that need no model: the folder is a π0, numeric ranges, the device."""
        p: list[str] = []
        chunk_size = None
        if self.model_path.startswith(TINY_PREFIX):
            name = self.model_path[len(TINY_PREFIX):]
            if name not in TINY_NAMES:
                p.append(f"policy.model_path: unknown tiny π0 {name!r}; known: "
                         f"{', '.join(TINY_PREFIX + n for n in TINY_NAMES)}")
        else:
            problem, chunk_size = pi0_folder_problem(Path(self.model_path).expanduser())
            if problem:
                p.append(problem)
        if chunk_size is not None and self.action_chunk > chunk_size:
            p.append(f"policy.action_chunk: {self.action_chunk} executed actions, but the checkpoint predicts chunks "
                     f"of {chunk_size} (its chunk_size)")
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
        if self.flow_logprob not in FLOW_LOGPROBS:
            p.append(f"policy.flow_logprob: unknown mode {self.flow_logprob!r}; known: {', '.join(FLOW_LOGPROBS)}")
        if not self.flow_noise_level > 0:
            p.append(f"policy.flow_noise_level: must be > 0, got {self.flow_noise_level}")
        if not 0 < self.flow_noise_std_min <= self.flow_noise_std_max:
            p.append(f"policy.flow_noise_std_min / flow_noise_std_max: need 0 < min <= max, got "
                     f"{self.flow_noise_std_min} and {self.flow_noise_std_max}")
        if self.max_cameras < 1:
            p.append(f"policy.max_cameras: must be >= 1, got {self.max_cameras}")
        if self.cameras is not None and (not self.cameras or any(c not in CAMERA_SOURCES for c in self.cameras)):
            p.append(f"policy.cameras: {self.cameras!r}: give one of {', '.join(CAMERA_SOURCES)} per camera of the "
                     "model, in its order")
        if self.max_instruction_tokens is not None and self.max_instruction_tokens < 2:
            p.append(f"policy.max_instruction_tokens: must be >= 2 (<bos> and a token), got {self.max_instruction_tokens}")
        if self.lora_rank < 0:
            p.append(f"policy.lora_rank: must be >= 0 (0: no LoRA), got {self.lora_rank}")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                p.append("policy.device: 'cuda' but torch sees no CUDA device here (use cpu or auto)")
        return p


    def spec_problems(self, spec: PolicySpec) -> list[str]:
        """The env's action and state dimensions against the checkpoint's ``max_action_dim`` / ``max_state_dim``, its
        cameras against ``policy.max_cameras``, and the normalization statistics' sizes against the env's; read from
        the checkpoint's ``config.json`` and statistics file, without loading weights."""
        from embodied.policies.pi0.pretrained import resolve_model_path
        from embodied.policies.pi0.processing import folder_stats, load_stats

        folder = resolve_model_path(self.model_path)
        config = read_config_json(folder) or {}
        where = f"policy.model_path {self.model_path!r}"
        p = size_problems(self, spec, int(config.get("max_action_dim", 32)), int(config.get("max_state_dim", 32)),
                          where, config)
        try:
            if self.norm_stats:
                stats, source = load_stats(Path(self.norm_stats).expanduser(), self.norm_stats), "policy.norm_stats"
            else:
                stats, source = folder_stats(folder), where
            if stats is not None:
                stats.check(spec.state_dim if self.use_states else 0, spec.action_dim, source)
        except (OSError, ValueError, KeyError) as exc:
            p.append(str(exc))
        return p


def size_problems(config: PI0PolicyConfig, spec: PolicySpec, max_action_dim: int, max_state_dim: int,
                  where: str, folder: dict[str, Any]) -> list[str]:
    """What of the env does not fit a π0 of these padded dimensions, the folder's cameras (its ``config.json``,
    ``folder``) or ``policy.max_cameras``."""
    p: list[str] = []
    if spec.image_shape is None:
        p.append("policy.type=pi0 needs images: set env.obs_mode to 'rgb' or 'state+rgb'")
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

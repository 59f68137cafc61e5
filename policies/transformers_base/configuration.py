"""``TransformersPolicyConfig``: the fields and checks every transformers-backed policy shares.

Read without torch (the config loader imports it). A subclass (``VLAConfig``, ``PI0PolicyConfig``) adds its
own fields and extends :meth:`TransformersPolicyConfig.validate`; where its default differs from the base's
(``model_path``: its own tiny model; ``use_states``; ``flow_logprob``) it redeclares that field with its
default only, as every policy config redeclares ``type``: ``PER_POLICY_DEFAULTS`` names them, and a test
holds every other shared field to being declared here alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from embodied.policy.config import PolicyConfig

TINY_PREFIX = "tiny:"  # policy.model_path: tiny:NAME is a tiny model built offline into the cache
FLOW_LOGPROBS = ("sde", "noise")  # policy.flow_logprob's modes (policies/flow_logprob.py)
# The shared fields a subclass redeclares with a default of its own (and nothing else: same type, same meaning).
PER_POLICY_DEFAULTS = ("type", "model_path", "use_states", "flow_logprob")


@dataclass
class TransformersPolicyConfig(PolicyConfig):
    model_path: str = ""  # local model folder (a save_pretrained folder), or tiny:NAME (built offline into the cache)
    device: Literal["cpu", "cuda", "auto"] = "cpu"  # where the rollout and actor copies run (auto: cuda when present)
    dtype: Literal["float32", "bfloat16"] = "float32"  # the transformers model's weights and activations (heads and log-probs stay float32)
    lora_rank: int = 0  # LoRA rank through peft (the policy's attention and MLP projections); 0 trains the whole model
    lora_alpha: float = 16.0  # LoRA scaling numerator (scale = alpha / rank)
    value_hidden: int = 256  # width of the value head's hidden layer
    gradient_checkpointing: bool = False  # recompute the model's transformer layers in backward (describe() names which): less activation memory, ~1.3x the compute
    use_states: bool = False  # feed the proprioceptive state to the policy (how: the policy's own)
    use_wrist_image: bool = True  # add the wrist camera image when the env has one
    flow_logprob: Literal["sde", "noise"] = "sde"  # a flow's RL log-probs: Flow-SDE (one noisy step per chunk) or Flow-Noise (learned std, every step)
    flow_noise_level: float = 0.5  # flow, sde: a in sigma_t = a * sqrt(t / (1 - t))
    flow_noise_std_min: float = 0.08  # flow, noise: lower bound of the learned std (normalized action units)
    flow_noise_std_max: float = 0.16  # flow, noise: upper bound of the learned std

    # The tiny models tiny:NAME may name, and what the policy calls one in messages ("backbone", "π0").
    tiny_names: ClassVar[tuple[str, ...]] = ()
    # "module:function" that writes tiny model NAME into a folder offline, (out_dir, name, seed) -> a description:
    # what `embodied make-tiny-vla --backbone NAME` calls, found through the policy registry.
    make_tiny: ClassVar[str] = ""
    model_noun: ClassVar[str] = "model"

    def required_observations(self) -> set[str]:
        return {"images", "states"} if self.use_states else {"images"}

    def validate(self) -> list[str]:
        """The shared checks that need no model: the model folder (or tiny name), the flow log-prob fields when
        the policy has a flow (``flow_noise()``), LoRA's rank, the device. A subclass adds its own."""
        p = self.model_path_problems()
        if self.flow_noise():
            p += self.flow_logprob_problems()
        if self.lora_rank < 0:
            p.append(f"policy.lora_rank: must be >= 0 (0: no LoRA), got {self.lora_rank}")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                p.append("policy.device: 'cuda' but torch sees no CUDA device here (use cpu or auto)")
        return p

    def model_path_problems(self) -> list[str]:
        """A tiny name this policy knows, or what :meth:`folder_problems` finds in the folder."""
        if self.model_path.startswith(TINY_PREFIX):
            name = self.model_path[len(TINY_PREFIX):]
            if name not in self.tiny_names:
                return [f"policy.model_path: unknown tiny {self.model_noun} {name!r}; known: "
                        f"{', '.join(TINY_PREFIX + n for n in self.tiny_names)}"]
            return []
        return self.folder_problems(Path(self.model_path).expanduser())

    def folder_problems(self, path: Path) -> list[str]:
        """Hook: what the model folder lacks for this policy, read without weights (the default finds nothing)."""
        return []

    def flow_logprob_problems(self) -> list[str]:
        p: list[str] = []
        if self.flow_logprob not in FLOW_LOGPROBS:
            p.append(f"policy.flow_logprob: unknown mode {self.flow_logprob!r}; known: {', '.join(FLOW_LOGPROBS)}")
        if not self.flow_noise_level > 0:
            p.append(f"policy.flow_noise_level: must be > 0 (a in sigma_t = a * sqrt(t / (1 - t))), got "
                     f"{self.flow_noise_level}")
        if not 0 < self.flow_noise_std_min <= self.flow_noise_std_max:
            p.append(f"policy.flow_noise_std_min / flow_noise_std_max: need 0 < min <= max, got "
                     f"{self.flow_noise_std_min} > {self.flow_noise_std_max}" if self.flow_noise_std_min > 0 else
                     f"policy.flow_noise_std_min: must be > 0, got {self.flow_noise_std_min}")
        return p

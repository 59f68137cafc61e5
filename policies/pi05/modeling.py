"""π0.5 as a policy: π0's policy (``policies/pi0/modeling.py``) over ``PI05ForConditionalGeneration``.

    policy = PI05Policy(PI05PolicyConfig(model_path="tiny:pi05-tiny", action_chunk=4), spec)
    out = policy.act(obs)            # obs: main_images uint8 [B, H, W, 3], task_descriptions, states
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)   # replays act exactly

Everything π0's policy does, π0.5 does the same way, through the same code: the recorded Euler loop over the
prefix's cache, Flow-SDE / Flow-Noise log-probs (``policies/flow_logprob.py``) with ``evaluate`` replaying ``act``
in one batched pass, the value head on the pooled prefix and the normalised state, SFT's flow loss (π0's
``forward``), LoRA on the language model and the expert, bf16, FSDP units, DSRL's steering, the checkpoint folder.
What is π0.5's (the difference, as the model's is in ``model.py``):

- its model and folders (``pretrained.py``): LeRobot π0.5 folders, our saved ones, ``tiny:pi05-tiny``;
- the state in the prompt, not in the expert (``processing.py``): ``prompt`` normalises the state and writes its
  bins into the text, so ``forward_inputs`` holds a prompt per row (the raw state too, for the value head);
- the normalisation (quantiles by default; the folder's ``normalization_mapping``; ``policy.normalization``):
  ``PI05Stats`` in the buffers ``state_lo`` / ``state_hi`` / ``action_lo`` / ``action_hi`` (q01/q99 or
  mean/std), saved as ``norm_stats.json`` with its mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.core.types import STATES, Obs
from embodied.policies.pi0.folders import read_config_json
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policies.pi0.processing import Prompt
from embodied.policies.pi05.configuration import PI05PolicyConfig, folder_max_length, folder_mode
from embodied.policies.pi05.pretrained import load_pi05, resolve_model_path
from embodied.policies.pi05.processing import PI05Inputs, PI05Stats, fitted_stats, folder_stats, normalize, unnormalize
from embodied.policy.base import PolicySpec

PROCESSOR_FILE = "processor_config.json"


class PI05Policy(PI0Policy):
    """π0.5 acting in an env (see the module docstring)."""

    resolve_folder = staticmethod(resolve_model_path)
    load_model = staticmethod(load_pi05)
    inputs_class = PI05Inputs
    prompt_length = staticmethod(folder_max_length)
    stat_buffers = ("state_lo", "state_hi", "action_lo", "action_hi")

    def __init__(self, config: PI05PolicyConfig, spec: PolicySpec) -> None:
        folder = read_config_json(resolve_model_path(config.model_path)) or {}
        self.norm_mode = config.normalization or folder_mode(folder) or "quantiles"
        super().__init__(config, spec)

    def bounds_stats(self, spec: PolicySpec) -> PI05Stats:
        """The env's action bounds onto [-1, 1] in the policy's mode (states unnormalised), when no statistics
        are given."""
        return PI05Stats.from_bounds(spec.action_low, spec.action_high, self.state_dim, self.norm_mode)

    def set_stats(self, stats: PI05Stats) -> None:
        """Use these statistics (buffers, so weight sync and checkpoints carry them) and their mode."""
        device = self.action_lo.device
        for name in self.stat_buffers:
            setattr(self, name, torch.tensor(getattr(stats, name), dtype=torch.float32, device=device))
        self.norm_mode, self.stats_source = stats.mode, stats.source

    def stats(self) -> PI05Stats:
        return PI05Stats(self.norm_mode, *(getattr(self, n).tolist() for n in self.stat_buffers), self.stats_source)

    def fitted_stats(self, states: torch.Tensor | None, actions: torch.Tensor) -> PI05Stats:
        """The demonstrations' statistics in the policy's mode (``fit_statistics`` is π0's)."""
        return fitted_stats(states, actions, self.state_dim, self.norm_mode)

    # -- inputs and outputs: the state in the prompt, the mode's normalisation ---------------------------------

    def normalized_state(self, states: Any) -> torch.Tensor:
        """Raw states [B, S] -> normalised (float32, on the device)."""
        s = torch.as_tensor(np.asarray(states), dtype=torch.float32).to(self.device_)
        return normalize(s, self.norm_mode, self.state_lo, self.state_hi)

    def prompt(self, obs: Obs) -> Prompt:
        """The prompt with the task and the discretised normalised state (an empty state without states)."""
        states = self.normalized_state(obs[STATES]).cpu().numpy() if self.state_dim else None
        return self.inputs.prompts(self.instructions(obs), states)

    def _state(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The normalised state, zero-padded to ``max_state_dim`` (the value head's input; the expert has none)."""
        padded = torch.zeros(inputs["input_ids"].shape[0], self.max_state_dim, device=self.device_)
        if self.state_dim:
            padded[:, :self.state_dim] = self.normalized_state(inputs[STATES])
        return padded.to(self.dtype_)

    def model_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions [B, C, A] -> normalised, zero-padded to the model's chunk [B, chunk_size, max_action_dim]."""
        out = torch.zeros(actions.shape[0], self.chunk_size, self.max_action_dim, device=actions.device)
        out[:, :actions.shape[1], :self.action_dim] = normalize(actions.float(), self.norm_mode, self.action_lo,
                                                                self.action_hi)
        return out

    def env_actions(self, x: torch.Tensor) -> torch.Tensor:
        """The model's chunk [B, chunk_size, max_action_dim] -> the executed env actions [B, C, A]."""
        return unnormalize(x[:, :self.chunk, :self.action_dim].float(), self.norm_mode, self.action_lo, self.action_hi)

    # -- checkpoints ---------------------------------------------------------------------------

    def save_own_files(self, out: Path) -> None:
        """``norm_stats.json`` (with its mode) and ``processor_config.json`` (the pipeline's settings)."""
        stats = self.stats()
        stats.save(out)
        (out / PROCESSOR_FILE).write_text(json.dumps(self.processor_settings(stats), indent=2))

    def load_own_files(self, src: Path) -> None:
        stats = folder_stats(src, self.norm_mode)
        if stats is not None:
            stats.check(self.state_dim, self.action_dim, f"checkpoint {src}")
            self.set_stats(stats)

    def processor_settings(self, stats: Any) -> dict[str, Any]:
        """What turns an env's observation into this π0.5's inputs, for ``processor_config.json``."""
        return {"processor_class": "PI05 (embodied)", "normalization": stats.mode, "max_state_dim": self.max_state_dim,
                "chunk_size": self.chunk_size,
                "embodied": {"tokenizer_max_length": self.inputs.max_length, "cameras": self.cameras,
                             "n_action_steps": self.chunk, "num_inference_steps": self.steps,
                             "prompt": "Task: {task stripped, _ and newlines as spaces}, State: {256 bins of the "
                                       "normalised state over [-1, 1]};\\nAction: ; <bos> first, truncated, "
                                       "right-padded",
                             "resize": "LeRobot resize_with_pad_torch: sizes truncated, bilinear without "
                                       "antialiasing, centred on black; pixels x / 255 * 2 - 1"}}

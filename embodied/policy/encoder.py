"""A policy's observation encoder: what an algorithm puts a head of its own on.

A policy config that can offer its perception apart from its heads names an encoder builder
(``PolicyConfig.encoder_class``, ``"module:attr"`` of a callable ``(config, spec) -> FeatureEncoder``). An algorithm
whose actor is not the policy's own (SAC's tanh-squashed Gaussian, ``embodied.algorithms.sac_actor``) builds that
encoder and its head over it, so no policy carries a head, or a registered twin type, for one algorithm.

``StatesEncoder`` is the encoder of a policy that acts on the env's state vector (the MLP's): the states, optionally
standardized with running statistics kept as buffers (so weight sync and checkpoints carry them).
"""

from __future__ import annotations

import re
import zlib
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from embodied.core.registry import load_entry_point
from embodied.core.types import STATES, TASK_DESCRIPTIONS, Obs
from embodied.policy.config import PolicyConfig, PolicySpec


@runtime_checkable
class FeatureEncoder(Protocol):
    """Observations -> features [B, ``out_features``]; an ``nn.Module``."""

    out_features: int  # F
    observes: tuple[str, ...]  # the forward-input keys ``observe`` reads (running statistics), () for none

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        """The tensors (CPU) the encoder reads of ``obs``: what a policy over it records in ``PolicyOutput``."""

    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Features [B, F] of forward inputs."""

    def observe(self, inputs: dict[str, torch.Tensor]) -> None:
        """Merge a batch's inputs into the encoder's running statistics (a no-op without any)."""


def build_encoder(config: PolicyConfig, spec: PolicySpec) -> FeatureEncoder:
    """The encoder ``config`` names (``PolicyConfig.encoder_class``); ``ValueError`` when it names none."""
    if not type(config).encoder_class:
        raise ValueError(f"policy.type={config.type} offers no observation encoder (PolicyConfig.encoder_class)")
    return load_entry_point(type(config).encoder_class)(config, spec)


INSTRUCTION = "instruction"  # the forward-input key of an instruction's hashed words, float32 [B, buckets]


def instruction_words(text: str) -> list[str]:
    """The words of an instruction, lower-cased, punctuation dropped ("Pick up the milk." -> pick, up, the, milk)."""
    return re.findall(r"[a-z0-9]+", text.lower())


def instruction_features(obs: Obs, buckets: int, where: str) -> torch.Tensor:
    """float32 [B, buckets]: each env's task description as a bag of hashed words (1 where a word of it falls).

    A state policy's language conditioning without a text model: the word's CRC-32 picks its bucket, so the
    features depend on nothing but the text (no vocabulary to save or to outgrow; an instruction never seen shares
    the buckets of the words it shares with seen ones). ``where`` names the setting in the error when the env gave
    no description."""
    descriptions = obs.get(TASK_DESCRIPTIONS)
    if descriptions is None or len(descriptions) == 0:
        raise ValueError(f"{where}: the policy reads each env's instruction from obs['task_descriptions'] and "
                         "these observations hold none (an off-policy replay keeps no instructions: set it to 0 "
                         "there)")
    features = torch.zeros(len(descriptions), buckets)
    for row, text in enumerate(descriptions):
        for word in instruction_words(str(text)):
            features[row, zlib.crc32(word.encode()) % buckets] = 1.0
    return features


def standardize(states: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """States standardized by running statistics, clipped to +-10 standard deviations."""
    return ((states - mean) / torch.sqrt(var + 1e-8)).clamp(-10.0, 10.0)


@torch.no_grad()
def merge_statistics(mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor, states: torch.Tensor) -> None:
    """Merge a batch of states [..., S] into the running ``mean``, ``var`` and ``count`` buffers, in place (the
    parallel algorithm of Chan et al.: the result does not depend on how the states were split into batches)."""
    batch = states.reshape(-1, mean.shape[0]).double()
    n, batch_mean, batch_var = batch.shape[0], batch.mean(0), batch.var(0, unbiased=False)
    total = count + n
    delta = batch_mean - mean
    m2 = var * count + batch_var * n + delta**2 * count * n / total
    mean.copy_(mean + delta * n / total)
    var.copy_(m2 / total)
    count.copy_(total)


def states_tensor(obs: Obs) -> torch.Tensor:
    """The observation's states as float32 [B, S] (what the state policies act on and replay)."""
    return torch.as_tensor(np.asarray(obs[STATES]), dtype=torch.float32)


class StatesEncoder(nn.Module):
    """The env's states [B, S] as features, standardized with ``normalize`` by running statistics (merged by
    ``observe`` unless ``frozen``). It has no parameters; the statistics are buffers."""

    def __init__(self, state_dim: int, normalize: bool = False, frozen: bool = False) -> None:
        super().__init__()
        self.normalize, self.frozen, self.out_features = normalize, frozen, state_dim
        self.observes: tuple[str, ...] = (STATES,) if normalize else ()
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_var", torch.ones(state_dim))
        self.register_buffer("state_count", torch.tensor(1e-4))

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {STATES: states_tensor(obs)}

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        states = inputs[STATES].float()
        return standardize(states, self.state_mean, self.state_var) if self.normalize else states

    def observe(self, inputs: dict[str, torch.Tensor]) -> None:
        if self.normalize and not self.frozen:
            merge_statistics(self.state_mean, self.state_var, self.state_count, inputs[STATES])

"""Toy policies: one that echoes an observation into its actions, so tests can check routing end to end, and
an MLP whose actor process dies on cue."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from embodied.core.types import STATES, Obs, PolicyOutput
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.mlp.modeling import MLPPolicy
from embodied.policy.base import Policy, PolicyConfig, PolicySpec


@dataclass
class EchoConfig(PolicyConfig):
    type: str = "echo"  # registered name
    model_class: ClassVar[str] = "tests.toy_policies:EchoPolicy"


class EchoPolicy(Policy):
    """Every sub-action's first component is ``states[:, 2]`` (CountingEnv's first reset seed)."""

    def __init__(self, config: EchoConfig, spec: PolicySpec) -> None:
        super().__init__()
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        self.bias = nn.Parameter(torch.zeros(1))

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        states = torch.as_tensor(obs[STATES])
        actions = torch.zeros(len(states), self.chunk, self.action_dim)
        actions[:, :, 0] = states[:, 2:3]
        zeros = torch.zeros(len(states))
        return PolicyOutput(actions, zeros, zeros + self.bias, {STATES: states})

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {STATES: torch.as_tensor(obs[STATES])}

    def evaluate(self, forward_inputs, actions):
        zeros = torch.zeros(len(actions))
        return zeros + self.bias, zeros, zeros + self.bias

    def value(self, obs: Obs) -> torch.Tensor:
        return torch.zeros(len(obs[STATES])) + self.bias


@dataclass
class DyingMLPConfig(MLPConfig):
    """The MLP policy, whose actor process dies in ``evaluate`` once the file ``marker`` appears."""

    type: str = "dying_mlp"  # registered name
    marker: str = ""  # the first process to evaluate after this file appears removes it and exits
    model_class: ClassVar[str] = "tests.toy_policies:DyingMLPPolicy"


@dataclass
class DyingActMLPConfig(MLPConfig):
    """The MLP policy, whose rollout worker's process dies in ``act`` once the file ``marker`` appears."""

    type: str = "dying_act_mlp"  # registered name
    marker: str = ""  # the first process to act after this file appears removes it and exits
    model_class: ClassVar[str] = "tests.toy_policies:DyingActMLPPolicy"


class DyingActMLPPolicy(MLPPolicy):
    """A rollout worker's process that dies while acting (an OOM kill, say): the process that claims the marker."""

    def __init__(self, config: DyingActMLPConfig, spec: PolicySpec) -> None:
        super().__init__(config, spec)
        self.config_marker = config.marker

    def act(self, obs, deterministic=False):
        if self.config_marker and os.path.exists(self.config_marker):
            try:
                os.unlink(self.config_marker)
            except FileNotFoundError:
                pass
            else:
                os._exit(1)
        return super().act(obs, deterministic)


class DyingMLPPolicy(MLPPolicy):
    """An actor rank's process that dies mid-update (as a machine or an OOM kill would take it): one process
    only, the one that claims the marker by removing it."""

    def evaluate(self, forward_inputs, actions):
        if self.config_marker and os.path.exists(self.config_marker):
            try:
                os.unlink(self.config_marker)
            except FileNotFoundError:
                pass  # another rank claimed it
            else:
                os._exit(1)
        return super().evaluate(forward_inputs, actions)

    def __init__(self, config: DyingMLPConfig, spec: PolicySpec) -> None:
        super().__init__(config, spec)
        self.config_marker = config.marker

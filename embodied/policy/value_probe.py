"""Which of a policy's parameters the value reaches and the action distribution does not: what critic warm-up
(``AlgorithmConfig.warmup_iterations``) may step while the policy must stay still.

Found from the contract alone, so a policy declares nothing for it: ``act`` on a probe batch built from the env's
spec (zero states, black images, a placeholder instruction), then ``evaluate`` of what it recorded and sampled, as
PPO replays a rollout, and autograd says which parameters the log-probs reach and which the values reach. A value head over a shared trunk (a VLA backbone,
a CNN encoder) gives the head alone: the trunk reaches the log-probs too.

Run once when the actor is built, before ranks shard the policy (names, not tensors, are kept: sharding replaces
the tensors but keeps their names), on a throw-away random stream so the run's own draws are untouched.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from embodied.core import rng
from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs
from embodied.policy.base import Policy, PolicySpec

PROBE_ROWS = 2
PROBE_INSTRUCTION = "pick up the object"  # any text a tokenizer takes: the probe reads the graph, not the output


def probe_observations(spec: PolicySpec, rows: int = PROBE_ROWS) -> Obs:
    """A batch of ``rows`` observations in the env's layout (``spec``): zeros, black images, one instruction."""
    obs: Obs = {TASK_DESCRIPTIONS: [PROBE_INSTRUCTION] * rows}
    if spec.state_dim > 0:
        obs[STATES] = np.zeros((rows, spec.state_dim), np.float32)
    if spec.image_shape is not None:
        obs[MAIN_IMAGES] = np.zeros((rows, *spec.image_shape), np.uint8)
    if spec.wrist_image_shape is not None:
        obs[WRIST_IMAGES] = np.zeros((rows, *spec.wrist_image_shape), np.uint8)
    return obs


def value_only_parameter_names(policy: Policy, spec: PolicySpec) -> list[str]:
    """Names of the trainable parameters that the values of ``policy.evaluate`` depend on and its log-probs do
    not (in ``named_parameters`` order); [] when every parameter the value reaches also shapes the actions."""
    if getattr(type(policy), "value_head_prefixes", None) is not None:
        warnings.warn(f"{type(policy).__name__}.value_head_prefixes is no longer read: critic warm-up finds the "
                      "parameters only the value reaches from evaluate() (embodied.policy.value_probe)",
                      FutureWarning, stacklevel=2)
    named = [(name, p) for name, p in policy.named_parameters() if p.requires_grad]
    if not named:
        return []
    device = named[0][1].device
    with rng.seeded(0), rng.drawing(rng.RandomStream(0)), torch.enable_grad():
        with torch.no_grad():  # what PPO replays: act's record (a flow head's chain included) and its chunks
            acted = policy.act(probe_observations(spec))
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in acted.forward_inputs.items()}
        actions = acted.actions.to(device)
        logprobs, _, values = policy.evaluate(inputs, actions)
        if not values.requires_grad:  # values of no parameter (a policy without a value head returns zeros)
            return []
        params = [p for _, p in named]
        acting = (torch.autograd.grad(logprobs.float().sum(), params, allow_unused=True, retain_graph=True)
                  if logprobs.requires_grad else [None] * len(params))
        valuing = torch.autograd.grad(values.float().sum(), params, allow_unused=True)
    return [name for (name, _), a, v in zip(named, acting, valuing, strict=True) if v is not None and a is None]

"""Critic warm-up's parameters, found from the policy contract: the value reaches them, the actions do not."""

from __future__ import annotations

import warnings

import pytest
import torch

from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.mlp.modeling import MLPPolicy
from embodied.policy.base import PolicySpec
from embodied.policy.value_probe import probe_observations, value_only_parameter_names

SPEC = PolicySpec(state_dim=5, image_shape=None, action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0))


def test_the_mlp_value_head_is_found_and_nothing_that_acts():
    torch.manual_seed(0)
    policy = MLPPolicy(MLPConfig(action_chunk=3, hidden_sizes=[8]), SPEC)
    names = value_only_parameter_names(policy, SPEC)
    critic = [n for n, _ in policy.named_parameters() if n.startswith("critic.")]
    assert names == critic and critic


def test_the_probe_leaves_the_global_stream_where_it_was():
    policy = MLPPolicy(MLPConfig(action_chunk=1), SPEC)
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    value_only_parameter_names(policy, SPEC)
    assert torch.equal(torch.rand(4), expected)


def test_the_probe_batch_follows_the_spec():
    spec = PolicySpec(state_dim=0, image_shape=(8, 6, 3), action_dim=1, action_low=(-1.0,), action_high=(1.0,),
                      wrist_image_shape=(4, 4, 3))
    obs = probe_observations(spec, rows=3)
    assert "states" not in obs and obs["main_images"].shape == (3, 8, 6, 3)
    assert obs["wrist_images"].shape == (3, 4, 4, 3) and len(obs["task_descriptions"]) == 3


def test_a_policy_that_still_names_its_value_head_is_told_it_is_not_read():
    class Declares(MLPPolicy):
        value_head_prefixes = ("critic.",)

    with pytest.warns(FutureWarning, match="value_head_prefixes is no longer read"):
        names = value_only_parameter_names(Declares(MLPConfig(), SPEC), SPEC)
    assert names and all(n.startswith("critic.") for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value_only_parameter_names(MLPPolicy(MLPConfig(), SPEC), SPEC)

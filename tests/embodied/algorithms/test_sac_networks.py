"""SAC's critics are the algorithm's: built from what the policy exposes (its features' width and its chunks)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from embodied.algorithms.sac_networks import MLPQEnsemble, build_critics, critic_sizes
from embodied.algorithms.sac_actor import TanhGaussianActor
from embodied.algorithms.sac_config import SACConfig
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policy.base import PolicySpec

SPEC = PolicySpec(state_dim=5, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)


def actor() -> TanhGaussianActor:
    return TanhGaussianActor(SACConfig().trained_policy(MLPConfig(action_chunk=3, hidden_sizes=[8])), SPEC)


def test_critics_read_the_policys_features_and_chunks():
    policy = actor()
    assert policy.feature_size == 5
    assert critic_sizes(policy, [16, 4]) == [5 + 3 * 2, 16, 4, 1]
    critics = build_critics(policy, 3, [16, 4], layernorm=True)
    assert isinstance(critics, MLPQEnsemble) and critics.num_critics == 3 and len(critics.norms) == 4
    features = policy.feature_encoder({"states": torch.randn(7, 5)})
    assert critics.q_values(features, torch.zeros(7, 3, 2)).shape == (3, 7)


def test_a_wrapper_policy_gives_its_inner_policys_shape():
    """DSRL's policy acts through an inner noise policy in noise space: the critics take that one's shape."""

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.noise_policy = actor()

    assert critic_sizes(Wrapper(), [16, 4]) == [11, 16, 4, 1]


def test_a_policy_without_features_is_refused_by_name():
    with pytest.raises(ValueError, match="Module: the critics need the policy's feature width"):
        build_critics(nn.Module(), 2, [8], layernorm=False)


def test_same_seed_same_critics():
    torch.manual_seed(3)
    a = build_critics(actor(), 2, [16, 4], layernorm=False)
    torch.manual_seed(3)
    b = build_critics(actor(), 2, [16, 4], layernorm=False)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert list(a.state_dict()) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                    "layers.2.weight", "layers.2.bias"]

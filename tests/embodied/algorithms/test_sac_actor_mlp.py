"""SAC's tanh-Gaussian actor over the MLP's states encoder (policy.type: mlp under SAC): its log-probs, and the
Q-ensemble SAC builds over it, against loops."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from embodied.algorithms.sac_networks import build_critics
from embodied.algorithms.sac_actor import TanhGaussianActor
from embodied.algorithms.sac_config import SACConfig
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policy.base import PolicySpec
from embodied.policy.q_functions import QFunctionPolicy, require_q_functions

SPEC = PolicySpec(state_dim=5, image_shape=None, action_dim=2, action_low=(-1.0, 0.0), action_high=(1.0, 4.0))


def actor_config(log_std_min: float = -5.0, **fields):
    """The config SAC trains for ``policy.type: mlp`` with ``fields``."""
    return SACConfig(log_std_min=log_std_min).trained_policy(MLPConfig(**{"action_chunk": 3, "hidden_sizes": [8],
                                                                          **fields}))


def policy(**overrides) -> TanhGaussianActor:
    torch.manual_seed(0)
    return TanhGaussianActor(actor_config(**overrides), SPEC)


def test_it_has_the_q_function_protocol():
    assert isinstance(policy(), QFunctionPolicy)
    require_q_functions(actor_config(), "sac")  # no error


def test_actions_lie_in_the_bounds_and_greedy_is_the_squashed_mean():
    p = policy()
    obs = {"states": torch.randn(64, 5).numpy()}
    sampled = p.act(obs).actions
    assert sampled.shape == (64, 3, 2)
    assert bool((sampled[..., 0].abs() <= 1).all()) and bool(((sampled[..., 1] >= 0) & (sampled[..., 1] <= 4)).all())
    greedy = p.act(obs, deterministic=True).actions
    mean = p._dist(torch.as_tensor(obs["states"])).mean.view(64, 3, 2)
    assert torch.allclose(greedy, p.action_center.view(3, 2) + p.action_half.view(3, 2) * torch.tanh(mean))
    assert torch.equal(greedy, p.act(obs, deterministic=True).actions)


def test_logprob_matches_change_of_variables_loop():
    p = policy()
    states = torch.randn(4, 5)
    torch.manual_seed(1)
    with torch.no_grad():
        actions, logprob = p.sample_with_logprob(states)
        dist = p._dist(states)
    flat = actions.reshape(4, -1)
    half, center = p.action_half.tolist(), p.action_center.tolist()
    for b in range(4):
        total = 0.0
        for i in range(flat.shape[1]):
            y = (float(flat[b, i]) - center[i]) / half[i]
            u = math.atanh(y)
            mu, sigma = float(dist.mean[b, i]), float(dist.stddev[b, i])
            gauss = -((u - mu) ** 2) / (2 * sigma**2) - math.log(sigma) - 0.5 * math.log(2 * math.pi)
            total += gauss - math.log(half[i] * (1 - y**2))  # d action / d u = half * (1 - tanh(u)^2)
        assert float(logprob[b]) == pytest.approx(total, rel=1e-3, abs=1e-3)
    # evaluate() inverts the squash: the same log-probs for the same actions
    with torch.no_grad():
        replayed, _, values = p.evaluate({"states": states}, actions)
    assert torch.allclose(replayed, logprob, atol=1e-3) and not values.any()


def test_sample_is_reparameterised():
    p = policy()
    actions, logprob = p.sample_with_logprob(torch.randn(4, 5))
    (actions.sum() + logprob.sum()).backward()
    assert p.mean_head.weight.grad is not None and p.log_std_head.weight.grad is not None


@pytest.mark.parametrize("layernorm", [False, True])
def test_batched_ensemble_matches_each_critic_alone(layernorm):
    p = policy()
    critics = build_critics(p, 4, [8, 8], layernorm)
    with torch.no_grad():  # give LayerNorm's affine parameters non-trivial values
        for param in critics.norms:
            param.add_(torch.randn_like(param) * 0.1)
    features, actions = torch.randn(6, 5), torch.randn(6, 3, 2)
    q = critics.q_values(features, actions)
    assert q.shape == (4, 6)
    x = torch.cat([features, actions.reshape(6, -1)], -1)
    for e in range(4):
        h = x
        for i, layer in enumerate(critics.layers):
            h = h @ layer.weight[e] + layer.bias[e, 0]
            if i < len(critics.layers) - 1:
                if layernorm:
                    h = F.layer_norm(h, h.shape[-1:]) * critics.norms[2 * i][e, 0] + critics.norms[2 * i + 1][e, 0]
                h = F.relu(h)
        assert torch.allclose(q[e], h.squeeze(-1), atol=1e-5)
    assert not torch.allclose(q[0], q[1])  # members start apart


def test_policies_without_q_functions_are_refused_by_name():
    from embodied.policies.mlp.configuration import MLPConfig

    with pytest.raises(ValueError, match="algorithm.name=sac needs a policy with Q-functions.*policy.type=mlp has none"):
        require_q_functions(MLPConfig(), "sac")
    from embodied.policies.vla.configuration import VLAConfig

    with pytest.raises(ValueError, match="policy.type=vla has none"):
        require_q_functions(VLAConfig(), "sac")


def test_config_checks_its_fields():
    assert actor_config(hidden_sizes=[]).validate()[0].startswith("policy.hidden_sizes")
    assert actor_config(log_std_min=3.0).validate()[0].startswith("algorithm.log_std_min")


def test_normalize_states_standardizes_what_actor_and_critics_see_and_observe_merges_batches():
    p = policy(normalize_states=True)
    assert p.observes == ("states",) and policy().observes == ()
    states = torch.randn(40, 5, dtype=torch.float64) * torch.tensor([0.1, 1.0, 10.0, 100.0, 1000.0]) + 3.0
    p.observe({"states": states[:15]})
    p.observe({"states": states[15:]})  # two batches merge to the statistics of all forty
    features = p.feature_encoder({"states": states.float()})
    assert torch.allclose(features.mean(0), torch.zeros(5), atol=2e-3)  # the prior count of 1e-4 at mean 0
    assert torch.allclose(features.std(0, unbiased=False), torch.ones(5), atol=5e-3)
    raw = policy()
    assert torch.equal(raw.feature_encoder({"states": states.float()}), states.float())  # off: as they are
    frozen = policy(normalize_states=True, freeze_state_statistics=True)
    frozen.observe({"states": states})
    assert torch.equal(frozen.encoder.state_mean, torch.zeros(5)) and torch.equal(frozen.encoder.state_var, torch.ones(5))
    assert {"encoder.state_mean", "encoder.state_var", "encoder.state_count"} <= set(p.state_dict())


def test_sft_clones_the_squashed_mean_and_fits_the_std_head_alone_and_stays_finite_at_the_bounds():
    """Demonstrated actions on the bounds (a closed gripper) give the tanh-Gaussian an infinite atanh; SFT's loss is
    the squared error of the squashed mean, plus the spread's likelihood around the mean held fixed (the std head
    alone learns from it)."""
    p = policy()
    states = torch.randn(4, 5)
    inputs = p.forward_inputs({"states": states.numpy()})
    at_bounds = torch.tensor([[-1.0, 4.0], [1.0, 0.0], [-1.0, 0.0]]).expand(4, 3, 2).clone()
    executed = torch.ones(4, 3, dtype=torch.bool)
    loss = p.supervised_loss(inputs, at_bounds, executed)
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(q.grad).all() for q in p.parameters() if q.grad is not None)
    p.zero_grad()
    greedy = p.act({"states": states.numpy()}, deterministic=True).actions
    p.supervised_loss(inputs, greedy, executed).backward()  # the mode is where the squared error is 0
    assert p.mean_head.weight.grad.abs().max() < 1e-3 and p.trunk[0].weight.grad.abs().max() < 1e-3  # rounding
    assert p.log_std_head.weight.grad.abs().max() > 1e-4  # the spread still learns
    executed[:, 1:] = False  # past an episode's end nothing counts
    moved = greedy.clone()
    moved[:, 1:] += 0.5
    assert torch.equal(p.supervised_loss(inputs, moved, executed), p.supervised_loss(inputs, greedy, executed))


def test_mode_error_is_zero_at_the_greedy_chunk_and_the_scaled_squared_distance_elsewhere():
    p = policy()
    states = torch.randn(4, 5)
    greedy = p.act({"states": states.numpy()}, deterministic=True).actions.detach()
    assert torch.allclose(p.mode_error(states, greedy), torch.zeros(4), atol=1e-10)
    other = greedy.clone()
    other[:, 1, 1] += 0.5  # the second dimension's box is [0, 4]: half-width 2, so 0.5 is 0.25 scaled
    assert torch.allclose(p.mode_error(states, other), torch.full((4,), 0.25 ** 2), atol=1e-6)
    p.mode_error(states, other).sum().backward()
    assert p.mean_head.weight.grad is not None and p.mean_head.weight.grad.abs().sum() > 0

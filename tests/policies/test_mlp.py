"""The Gaussian MLP policy: shapes, determinism, replay by ``evaluate``, gradients, config wiring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied.config import load_config
from embodied.core.types import STATES
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.mlp.modeling import MLPPolicy
from embodied.policy.base import Policy, PolicySpec, build_policy

B, S, C, A = 5, 7, 4, 3
SPEC = PolicySpec(state_dim=S, image_shape=None, action_dim=A, action_low=(-1.0,) * A, action_high=(1.0,) * A)


def make(**kwargs) -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPConfig(action_chunk=C, hidden_sizes=[32, 32], **kwargs), SPEC)


def obs(batch: int = B, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {STATES: rng.normal(size=(batch, S)).astype(np.float32), "task_descriptions": ["t"] * batch}


def test_act_shapes():
    out = make().act(obs())
    assert out.actions.shape == (B, C, A) and out.actions.dtype == torch.float32
    assert out.logprobs.shape == (B,) and out.values.shape == (B,)
    assert set(out.forward_inputs) == {STATES} and out.forward_inputs[STATES].shape == (B, S)
    assert MLPPolicy.logprob_granularity == "chunk"


def test_act_accepts_a_single_env_and_float64_states():
    policy = make()
    o = obs(1)
    o[STATES] = o[STATES].astype(np.float64)
    out = policy.act(o)
    assert out.actions.shape == (1, C, A) and out.forward_inputs[STATES].dtype == torch.float32


def test_deterministic_act_returns_the_mean_and_is_repeatable():
    policy = make()
    o = obs()
    first, second = policy.act(o, deterministic=True), policy.act(o, deterministic=True)
    torch.testing.assert_close(first.actions, second.actions, rtol=0, atol=0)
    mean = policy.actor_mean(torch.as_tensor(o[STATES])).view(B, C, A)
    torch.testing.assert_close(first.actions, mean, rtol=0, atol=0)
    # The mean is the mode: its log-prob is the largest any action gets.
    sampled = policy.act(o)
    assert (first.logprobs > sampled.logprobs).all()


def test_sampled_actions_vary_and_follow_the_std():
    policy = make(init_log_std=0.0)
    o = obs(2000)
    out = policy.act(o)
    mean = policy.act(o, deterministic=True).actions
    assert not torch.equal(out.actions, mean)
    std = (out.actions - mean).std().item()
    assert std == pytest.approx(1.0, rel=0.05)


def test_evaluate_replays_act_exactly():
    policy = make()
    for deterministic in (False, True):
        out = policy.act(obs(), deterministic=deterministic)
        logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
        torch.testing.assert_close(logprobs, out.logprobs, rtol=0, atol=0)
        torch.testing.assert_close(values, out.values, rtol=0, atol=0)
        assert entropy.shape == (B,)


def test_evaluate_on_a_flat_batch_of_chunks():
    """The actor flattens [T, N] into one batch; evaluate must work on any batch size."""
    policy = make()
    outs = [policy.act(obs(seed=s)) for s in range(3)]
    states = torch.cat([o.forward_inputs[STATES] for o in outs])
    actions = torch.cat([o.actions for o in outs])
    logprobs, _, values = policy.evaluate({STATES: states}, actions)
    torch.testing.assert_close(logprobs, torch.cat([o.logprobs for o in outs]))
    torch.testing.assert_close(values, torch.cat([o.values for o in outs]))


def test_entropy_is_positive_and_matches_the_std():
    policy = make(init_log_std=0.0)
    out = policy.act(obs())
    _, entropy, _ = policy.evaluate(out.forward_inputs, out.actions)
    assert (entropy > 0).all()
    expected = C * A * 0.5 * np.log(2 * np.pi * np.e)  # unit Gaussian per dimension
    torch.testing.assert_close(entropy, torch.full((B,), expected, dtype=torch.float32))


def test_value_matches_act_values():
    policy = make()
    o = obs()
    torch.testing.assert_close(policy.value(o), policy.act(o).values, rtol=0, atol=0)
    assert policy.value(o).shape == (B,)


def test_gradients_flow_to_actor_critic_and_log_std():
    policy = make()
    with torch.no_grad():
        out = policy.act(obs())
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.mean() + entropy.mean() + values.pow(2).mean()).backward()
    for name, param in policy.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    assert policy.log_std.grad.abs().sum() > 0
    assert any(p.grad.abs().sum() > 0 for p in policy.actor_mean.parameters())
    assert any(p.grad.abs().sum() > 0 for p in policy.critic.parameters())


def test_activation_and_hidden_sizes():
    policy = MLPPolicy(MLPConfig(hidden_sizes=[16, 8, 4], activation="relu"), SPEC)
    linears = [m for m in policy.actor_mean if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(S, 16), (16, 8), (8, 4), (4, A)]
    assert sum(isinstance(m, torch.nn.ReLU) for m in policy.actor_mean) == 3
    out = policy.act(obs())
    assert out.actions.shape == (B, 1, A)
    assert policy.log_std.shape == (A,)


def test_rgb_only_spec_raises_a_clear_error():
    spec = PolicySpec(state_dim=0, image_shape=(64, 64, 3), action_dim=A, action_low=(-1.0,) * A,
                      action_high=(1.0,) * A)
    with pytest.raises(ValueError, match=r"policy.type=mlp needs state observations.*obs_mode"):
        MLPPolicy(MLPConfig(), spec)


def test_config_builds_through_build_policy():
    cfg = load_config(None, ["policy.hidden_sizes=[32]", "policy.action_chunk=2"])
    assert isinstance(cfg.policy, MLPConfig) and cfg.policy.hidden_sizes == [32]
    policy = build_policy(cfg.policy, SPEC)
    assert isinstance(policy, MLPPolicy) and isinstance(policy, Policy)
    linears = [m for m in policy.actor_mean if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(S, 32), (32, 2 * A)]
    assert policy.act(obs()).actions.shape == (B, 2, A)


def test_default_config_builds_too():
    """A config without a policy section gets the default policy type's full config."""
    cfg = load_config(None)
    assert isinstance(cfg.policy, MLPConfig)
    assert isinstance(build_policy(cfg.policy, SPEC), MLPPolicy)


def test_state_dict_round_trip_gives_the_same_actions():
    a, b = make(), MLPPolicy(MLPConfig(action_chunk=C, hidden_sizes=[32, 32]), SPEC)
    b.load_state_dict(a.state_dict())
    o = obs()
    torch.testing.assert_close(a.act(o, deterministic=True).actions, b.act(o, deterministic=True).actions)


def test_state_normalization_tracks_rollout_statistics_and_keeps_replay_exact():
    from embodied.config import load_config
    from embodied.policy.base import PolicySpec, build_policy

    cfg = load_config(None, ["policy.normalize_states=true", "policy.hidden_sizes=[16]", "policy.action_chunk=2"])
    spec = PolicySpec(state_dim=3, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)
    policy = build_policy(cfg.policy, spec)
    gen = torch.Generator().manual_seed(0)
    first = torch.randn(64, 3, generator=gen) * 5 + 3
    second = torch.randn(32, 3, generator=gen) * 2 - 1
    policy.observe({"states": first})
    policy.observe({"states": second})
    both = torch.cat([first, second])
    torch.testing.assert_close(policy.state_mean, both.mean(0), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(policy.state_var, both.var(0, unbiased=False), atol=1e-3, rtol=1e-3)
    out = policy.act({"states": both.numpy()})
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    torch.testing.assert_close(logprobs, out.logprobs)
    torch.testing.assert_close(values, out.values)
    assert "state_mean" in policy.state_dict()  # travels with weight syncs and checkpoints


def test_instruction_features_hash_words_into_buckets():
    from embodied.policy.encoder import instruction_features, instruction_words

    assert instruction_words("Pick up the Milk, and place it.") == ["pick", "up", "the", "milk", "and", "place", "it"]
    feats = instruction_features({"task_descriptions": ["pick up the milk", "pick up the ketchup", "PICK UP THE MILK"]},
                                 64, "here")
    assert feats.shape == (3, 64) and set(feats.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(feats[0], feats[2])  # the text alone decides, case aside
    assert not torch.equal(feats[0], feats[1]) and (feats[0] * feats[1]).sum() >= 1  # shared words share buckets
    with pytest.raises(ValueError, match="here: .*task_descriptions.*replay keeps no instructions"):
        instruction_features({STATES: np.zeros((2, S))}, 64, "here")


def test_instruction_conditioned_policy_acts_on_the_instruction_and_replays_it():
    policy = make(instruction_features=32)
    o = obs(4)
    o["task_descriptions"] = ["pick up the milk"] * 2 + ["pick up the ketchup"] * 2
    o[STATES][:] = o[STATES][0]  # the same states: only the instruction differs
    out = policy.act(o, deterministic=True)
    assert set(out.forward_inputs) == {STATES, "instruction"} and out.forward_inputs["instruction"].shape == (4, 32)
    torch.testing.assert_close(out.actions[0], out.actions[1], rtol=0, atol=0)
    assert not torch.allclose(out.actions[0], out.actions[2])
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    torch.testing.assert_close(logprobs, out.logprobs, rtol=0, atol=0)
    torch.testing.assert_close(values, out.values, rtol=0, atol=0)
    torch.testing.assert_close(policy.value(o), out.values, rtol=0, atol=0)


def test_instruction_features_config_is_checked():
    assert MLPConfig(instruction_features=-1).validate() == [
        "policy.instruction_features: need 0 (off) or a number of buckets, got -1"]
    from embodied.policies.mlp.modeling import states_encoder

    with pytest.raises(ValueError, match="policy.instruction_features: an algorithm that puts its own head"):
        states_encoder(MLPConfig(instruction_features=8), SPEC)


def test_an_ensemble_acts_on_the_average_of_independently_initialized_members():
    policy = make(ensemble_size=3)
    o = obs()
    means = policy.actor_mean(torch.as_tensor(o[STATES]))
    assert means.shape == (3, B, C * A)
    assert not torch.allclose(means[0], means[1]) and not torch.allclose(means[1], means[2])  # their own draws
    out = policy.act(o, deterministic=True)
    torch.testing.assert_close(out.actions, means.mean(0).view(B, C, A), rtol=0, atol=0)
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)  # replay: as one Gaussian policy
    torch.testing.assert_close(logprobs, out.logprobs, rtol=0, atol=0)
    torch.testing.assert_close(values, out.values, rtol=0, atol=0)
    # A member computes what a lone MLP of the same weights computes.
    lone = torch.as_tensor(o[STATES])
    for i, layer in enumerate(policy.actor_mean.layers):
        lone = lone @ layer.weight[1] + layer.bias[1]
        lone = torch.tanh(lone) if i < len(policy.actor_mean.layers) - 1 else lone
    torch.testing.assert_close(lone, means[1])


def test_an_ensemble_fits_each_member_on_its_own_likelihood():
    policy = make(ensemble_size=2)
    with torch.no_grad():  # members far apart (their last layers start near 0), so the two losses below differ
        policy.actor_mean.layers[-1].weight.normal_()
    inputs = policy.forward_inputs(obs())
    actions = torch.randn(B, C, A)
    executed = torch.ones(B, C, dtype=torch.bool)
    loss = policy.supervised_loss(inputs, actions, executed)
    means = policy.actor_mean(torch.as_tensor(inputs[STATES]))
    std = policy.log_std.exp()
    each = [-torch.distributions.Normal(m, std).log_prob(actions.reshape(B, -1)).sum(-1).mean() for m in means]
    torch.testing.assert_close(loss, torch.stack(each).mean())
    # not the average's likelihood: that would fit one wide network
    average = -policy.evaluate(inputs, actions)[0].mean()
    assert not torch.isclose(loss, average)
    loss.backward()
    assert all(layer.weight.grad is not None and (layer.weight.grad.abs().sum((1, 2)) > 0).all()
               for layer in policy.actor_mean.layers)


def test_ensemble_config_is_checked_and_sac_refuses_it():
    assert MLPConfig(ensemble_size=0).validate() == ["policy.ensemble_size: need 1 (one actor) or more, got 0"]
    from embodied.policies.mlp.modeling import states_encoder

    with pytest.raises(ValueError, match="policy.ensemble_size: an algorithm that puts its own head .* not 3"):
        states_encoder(MLPConfig(ensemble_size=3), SPEC)
    assert "ensemble_size" in MLPConfig.architecture_fields  # init_from refuses a checkpoint of another size


def test_init_from_log_std_is_refused_where_an_algorithm_puts_its_own_head():
    from embodied.config import ConfigError

    with pytest.raises(ConfigError, match="policy.init_from_log_std: algorithm.name=sac puts its own head"):
        load_config(None, ["policy.type=mlp", "algorithm.name=sac", "policy.init_from=run",
                           "policy.init_from_log_std=-1.0"])

"""The rollout-throughput benchmark runs end to end at toy sizes (no timing assertions)."""

from __future__ import annotations

import math

from benchmarks.rollout_throughput import RandomConfig, RandomPolicy, main

from embodied.policy import PolicySpec, build_policy


def test_benchmark_main_returns_finite_positive_rates(capsys):
    rates = main(["--num-envs", "4", "--chunk", "4", "--steps", "400", "--chunk-steps", "8"])
    assert set(rates) == {"framework", "raw", "ratio"}
    for name, value in rates.items():
        assert math.isfinite(value) and value > 0, (name, value)
    out = capsys.readouterr().out
    assert "framework (local, 1 stage)" in out and "raw gymnasium SyncVectorEnv" in out and "framework / raw" in out


def test_random_policy_acts_within_bounds():
    spec = PolicySpec(state_dim=3, image_shape=None, action_dim=2, action_low=(-1.0, 0.0), action_high=(1.0, 2.0))
    policy = build_policy(RandomConfig(action_chunk=3), spec)
    assert isinstance(policy, RandomPolicy)
    out = policy.act({"task_descriptions": ["x"] * 50})
    assert out.actions.shape == (50, 3, 2)
    assert (out.actions[..., 0] >= -1).all() and (out.actions[..., 0] <= 1).all()
    assert (out.actions[..., 1] >= 0).all() and (out.actions[..., 1] <= 2).all()
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    assert logprobs.shape == values.shape == (50,)

"""The rollout-throughput benchmark runs end to end at toy sizes (no timing assertions)."""

from __future__ import annotations

import math

from benchmarks.rollout_throughput import RandomConfig, RandomPolicy, main

from embodied.policy.base import PolicySpec, build_policy


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


def test_async_vs_sync_benchmark_runs_both_modes(capsys):
    from benchmarks.async_vs_sync import main as async_main

    figures = async_main(["configs/reach_mlp_ppo.yaml", "--iterations", "3", "--eval-every", "3", "--target", "0.0",
                          "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2", "env.preflight=false"])
    for mode in ("sync", "async"):
        assert math.isfinite(figures[mode]["env_steps_per_s"]) and figures[mode]["env_steps_per_s"] > 0
        assert figures[mode]["steps_to_target"] > 0  # target 0: reached at the first eval
        assert 0 < figures[mode]["cpu_busy"] <= 1  # a share of the machine's CPU time (/proc/stat)
    assert figures["async"]["staleness_max"] <= 1 and figures["sync"]["staleness_max"] == 0
    assert "ideal overlap (r + u) / max(r, u)" in capsys.readouterr().out

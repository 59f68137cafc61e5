"""NaN and inf: caught where they first appear (env, policy, update), named, and never trained on,
published or checkpointed; an unstable MuJoCo model truncates its episode and fails check-env."""

from __future__ import annotations

import math

import pytest
import torch

import embodied.runs.train as runner
from embodied.config import EnvConfig, load_config
from embodied.core.numerics import NonFiniteError, NonFinitePolicyError, NonFiniteUpdateError
from embodied.core.types import find_env_error

NAN = ["env.id=tests.toy_envs:NanEnv", "env.num_envs=4", "env.max_episode_steps=20", "eval_env.num_envs=2",
       "eval_env.kwargs={nan_at: 1000}", "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2",
       "rollout.chunk_steps=4", "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=2",
       "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=1", "logger.backends=[]",
       "logger.progress_bar=false", "runner.plot=false", "env.preflight=false"]


def nan_config(tmp_path, *overrides):
    return load_config(None, [*NAN, f"experiment.output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize(("what", "expected"), [
    ("reward", "returned a non-finite reward (nan) at sub-step 0 of the chunk (env index 2, env worker 0, "
               "iteration 1, chunk step 1)"),
    ("obs", "returned a non-finite observation (states holds NaN or inf) at sub-step 0 of the chunk "
            "(env index 2, env worker 0, iteration 1, chunk step 1)"),
    ("final_obs", "returned a non-finite terminal observation (states holds NaN or inf) at sub-step 0"),
])
def test_nan_from_an_env_is_caught_at_its_sub_step_naming_the_env(tmp_path, what, expected):
    cfg = nan_config(tmp_path, f"env.kwargs={{nan_at: 3, nan_env: 2, what: {what}}}")
    with pytest.raises(Exception) as info:
        runner.train(cfg)
    error = find_env_error(info.value)
    assert isinstance(error, NonFiniteError), repr(info.value)
    assert str(error).startswith("env 'tests.toy_envs:NanEnv[env rank 0 stage 0]' returned a non-finite")
    assert expected in str(error)
    assert not list(tmp_path.rglob("iter_*"))  # nothing trained on the NaN, nothing checkpointed


def test_nan_from_the_second_env_worker_names_it_and_the_error_survives_pickling_for_ray(tmp_path):
    """Two env workers: the global env index and the worker that owns it. On Ray the error crosses a process as a
    pickle, as every env error does (``test_env_errors``: its Ray test and its pickling test)."""
    import pickle

    cfg = nan_config(tmp_path, "env.kwargs={nan_at: 3, nan_env: 2}", "cluster.num_env_workers=2")
    with pytest.raises(Exception) as info:
        runner.train(cfg)
    error = find_env_error(info.value)
    assert isinstance(error, NonFiniteError) and "env index 2, env worker 1, iteration 1" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, NonFiniteError) and str(again) == str(error)


def test_nan_actions_of_the_policy_are_refused_before_an_env_executes_them(tmp_path, monkeypatch):
    from embodied.policies.mlp.modeling import MLPPolicy

    act = MLPPolicy.act

    def nan_act(self, obs, deterministic=False):
        out = act(self, obs, deterministic)
        out.actions[1] = float("nan")
        return out

    monkeypatch.setattr(MLPPolicy, "act", nan_act)
    with pytest.raises(NonFinitePolicyError, match="rollout worker 0: the policy \\(weights version 0\\) produced "
                                                   "non-finite actions at chunk step 0, first for env index 1"):
        runner.train(nan_config(tmp_path, "env.kwargs={nan_at: 1000}"))


def poison_loss(monkeypatch, calls: set[int]):
    """Make the PPO loss NaN on the given (0-based) loss calls."""
    from embodied.algorithms.ppo import PPO

    loss, count = PPO.loss, [0]

    def wrapped(self, *args, **kwargs):
        out = loss(self, *args, **kwargs)
        if count[0] in calls:
            out.loss = out.loss * float("nan")
        count[0] += 1
        return out

    monkeypatch.setattr(PPO, "loss", wrapped)


def test_a_nan_loss_stops_the_run_naming_the_step_and_term_and_nothing_is_checkpointed(tmp_path, monkeypatch):
    poison_loss(monkeypatch, {5})  # iteration 2 (4 minibatches an iteration), epoch 0, minibatch 1
    with pytest.raises(NonFiniteUpdateError, match="update at iteration 2, epoch 0, minibatch 1: non-finite loss=nan"):
        runner.train(nan_config(tmp_path, "env.kwargs={nan_at: 1000}"))
    checkpoints = sorted(p.name for p in tmp_path.rglob("iter_*"))
    assert checkpoints == ["iter_000001"]  # iteration 2's weights were never written


def test_skip_nonfinite_updates_skips_and_counts_the_bad_minibatches(tmp_path, monkeypatch):
    from embodied.checkpoint.store import load_checkpoint

    poison_loss(monkeypatch, {0, 5, 6})
    result = runner.train(nan_config(tmp_path, "env.kwargs={nan_at: 1000}", "algorithm.skip_nonfinite_updates=true"))
    assert [m["train/skipped_minibatches"] for m in result.history] == [1.0, 2.0]
    weights = load_checkpoint(result.checkpoint)["actor"]["policy"]
    assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point())
    assert all(math.isfinite(m["train/loss"]) for m in result.history)


def test_an_unstable_mujoco_model_truncates_the_episode_and_is_counted(tmp_path):
    from embodied.envs.chunked import ChunkedVectorEnv
    from tests.toy_envs import unstable_reach

    venv = ChunkedVectorEnv([unstable_reach], auto_reset=True)
    venv.reset(seed=0)
    episodes = []
    for _ in range(5):
        result = venv.chunk_step(torch.ones(1, 4, 4).numpy())
        episodes += result.episodes
    venv.close()
    assert episodes and episodes[0].sim_unstable and episodes[0].length < 50  # cut short, not at the time limit
    result = runner.train(load_config(None, [
        "env.id=tests.toy_envs:unstable_reach", "env.num_envs=2", "eval_env.num_envs=2", "policy.hidden_sizes=[8]",
        "rollout.chunk_steps=8", "algorithm.num_minibatches=1", "runner.iterations=1", "runner.eval_episodes=2",
        "logger.backends=[]", "runner.plot=false", "env.preflight=false", f"experiment.output_dir={tmp_path}"]))
    assert result.history[0]["env/sim_unstable"] >= 1 and math.isfinite(result.history[0]["env/return"])


def test_check_env_fails_a_model_that_goes_unstable_under_random_actions():
    from embodied.env_runtime.check_env import check_env

    rows = {r.name: r for r in check_env(EnvConfig(id="tests.toy_envs:unstable_reach"), fast=True, render="skip")}
    row = rows["simulation stays stable under random actions"]
    assert not row.passed and row.severity == "error" and "went unstable" in row.detail and "timestep" in row.fix
    for fast, steps in ((True, 20), (False, 100)):  # the preflight's share, and check-env's --steps
        stable = {r.name: r for r in check_env(EnvConfig(id="Reach-v0"), fast=fast, render="skip")}
        row = stable["simulation stays stable under random actions"]
        assert row.passed and row.detail == f"{steps} random steps"


def test_a_batched_envs_chunk_result_is_checked_too():
    import numpy as np

    from embodied.core.numerics import check_env_result
    from embodied.core.types import ChunkStepResult

    def result(rewards, states, executed):
        return ChunkStepResult({"states": states}, rewards, np.zeros_like(executed), np.zeros_like(executed),
                               executed, np.zeros(len(executed), bool))

    executed = np.array([[True, True], [True, False]])
    fine = result(np.array([[0.0, 1.0], [2.0, np.nan]], np.float32), np.zeros((2, 3), np.float32), executed)
    check_env_result(fine, "X-v0", 0, "")  # a NaN where no sub-step ran is padding, not data
    bad = result(np.zeros((2, 2), np.float32), np.array([[0, 0, 0], [0, np.inf, 0]], np.float32), executed)
    with pytest.raises(NonFiniteError, match=r"env 'X-v0' returned a non-finite observation \(states holds NaN or "
                                             r"inf\) at sub-step 0 of the chunk \(env index 6, iteration 4\)"):
        check_env_result(bad, "X-v0", 5, "iteration 4")

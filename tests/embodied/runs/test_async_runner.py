"""``runner.mode: async``: rollouts overlap updates, staleness stays bounded, nothing is trained twice or lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ConfigError, load_config
from embodied.workers.actor_worker import ActorWorker

COUNTING = "tests.toy_envs:CountingEnv"


def toy_config(tmp_path: Path, *overrides: str):
    """A seconds-long PPO run on CountingEnv with a small MLP (disaggregated: async needs its own copy)."""
    return load_config(None, [
        f"env.id={COUNTING}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=5", "runner.eval_every=2",
        "runner.eval_episodes=2", "runner.checkpoint_every=0", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", "cluster.placement=disaggregated", "env.preflight=false",
        f"experiment.output_dir={tmp_path}", *overrides,
    ])


def params(result) -> dict[str, torch.Tensor]:
    return load_checkpoint(result.checkpoint)["actor"]["policy"]


@pytest.fixture
def slow_actor(monkeypatch):
    """Updates take 0.3 s longer: the producer runs ahead until the gate stops it."""
    original = ActorWorker.update

    def slow(self, trajectories, iteration):
        time.sleep(0.3)
        return original(self, trajectories, iteration)

    monkeypatch.setattr(ActorWorker, "update", slow)


def test_async_with_max_staleness_0_is_the_sync_loop_to_the_last_bit(tmp_path):
    sync = runner.train(toy_config(tmp_path / "sync"))
    async_ = runner.train(toy_config(tmp_path / "async", "runner.mode=async", "algorithm.max_staleness=0"))
    p_sync, p_async = params(sync), params(async_)
    for key in p_sync:
        assert torch.equal(p_sync[key], p_async[key]), key
    for ms, ma in zip(sync.history, async_.history, strict=True):
        for key in ("env_steps", "env/return", "train/loss", "train/approx_kl"):
            assert ms[key] == ma[key], key
        assert ma["train/staleness_max"] == 0.0
    assert sync.final_eval == async_.final_eval
    again = runner.train(toy_config(tmp_path / "again", "runner.mode=async", "algorithm.max_staleness=0"))
    assert all(torch.equal(p_async[k], params(again)[k]) for k in p_async)  # same seed, same run


@pytest.mark.parametrize("staleness", [1, 2])
def test_the_gate_bounds_staleness_and_blocks_producers_of_a_slow_actor(tmp_path, slow_actor, staleness):
    result = runner.train(toy_config(tmp_path, "runner.mode=async", f"algorithm.max_staleness={staleness}",
                                     "runner.iterations=6"))
    stale = [m["train/staleness_max"] for m in result.history]
    assert max(stale) == staleness  # the producer ran ahead as far as allowed ...
    assert all(s <= staleness for s in stale)  # ... and never further
    assert all(m["async/buffer_depth"] <= staleness for m in result.history)
    # Once ahead, the producer waits at the gate for each update (0.3 s or more).
    assert max(m["async/producer_wait_s"] for m in result.history) > 0.2
    assert result.discarded == 0  # the producer made exactly the rollouts the run trained on
    assert result.history[-1]["env_steps"] == 6 * 4 * 4 * 2


def test_new_weights_reach_a_running_epoch_and_each_chunk_step_keeps_its_version(tmp_path):
    result = runner.train(toy_config(tmp_path, "runner.mode=async", "algorithm.max_staleness=2",
                                     "env.id=tests.toy_envs:SlowEnv", "env.kwargs={delay: 0.01}", "runner.iterations=4"))
    # The update on rollout 1 finishes while rollout 2 runs (the env is slow): rollout 2 acts with two versions.
    assert max(m["async/versions_per_rollout"] for m in result.history) >= 2
    assert all(m["train/staleness_max"] <= 2 for m in result.history)
    assert result.discarded == 0


def test_rollouts_in_flight_at_a_stop_are_counted_not_lost(tmp_path, slow_actor, monkeypatch):
    stop_at = 2
    real_update = ActorWorker.update

    def update_then_stop(self, trajectories, iteration):
        out = real_update(self, trajectories, iteration)
        if iteration == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # graceful stop after this iteration
        return out

    monkeypatch.setattr(ActorWorker, "update", update_then_stop)
    result = runner.train(toy_config(tmp_path, "runner.mode=async", "algorithm.max_staleness=2",
                                     "runner.iterations=8"))
    assert result.interrupted == "SIGTERM" and len(result.history) == stop_at
    saved = load_checkpoint(result.checkpoint)
    assert saved["iteration"] == stop_at
    assert 1 <= result.discarded <= 3  # produced ahead (at most max_staleness + 1), never trained on
    assert saved["async_in_flight"] <= result.discarded


def test_async_runs_eval_checkpoint_and_resume(tmp_path):
    first = runner.train(toy_config(tmp_path, "runner.mode=async", "runner.iterations=2", "runner.checkpoint_every=1"))
    assert "eval/success_rate" in first.history[-1]
    resumed = runner.train(toy_config(tmp_path, "runner.mode=async", "runner.iterations=4",
                                      f"runner.resume_from={first.run_dir}"))
    assert resumed.run_dir == first.run_dir
    assert resumed.history[0]["async/behaviour_version"] == 2.0  # the resumed weights produce the first rollout
    assert all(m["train/staleness_max"] <= 1 for m in resumed.history)
    assert load_checkpoint(resumed.checkpoint)["actor"]["version"] == 4


def test_async_on_the_local_backend_warns_that_threads_overlap_little(tmp_path):
    with pytest.warns(UserWarning, match="take turns on its interpreter lock"):
        runner.train(toy_config(tmp_path, "runner.mode=async", "runner.iterations=1"))


def test_async_config_errors():
    with pytest.raises(ConfigError, match="algorithm.max_staleness: must be >= 0"):
        load_config(None, ["algorithm.max_staleness=-1"])
    with pytest.raises(ConfigError, match="algorithm.name=grpo does not correct for"):
        load_config("configs/pick_place_mlp_grpo.yaml", ["runner.mode=async"])
    with pytest.raises(ConfigError, match="cluster.placement: colocated rollout workers act with the actor's"):
        load_config(None, ["runner.mode=async", "cluster.placement=colocated"])

"""Local workers draw from their own streams (``embodied.core.rng``): the actor's learner may draw from torch's
global generator (a module built lazily, dropout) and rollout threads may act at once, and two identical runs
stay identical to the last bit."""

from __future__ import annotations

from pathlib import Path

import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import load_checkpoint
from embodied.config import load_config
from embodied.workers.actor_worker import ActorWorker


def toy_config(tmp_path: Path, *overrides: str):
    """A seconds-long PPO run on CountingEnv, local backend (every worker a thread of this process)."""
    return load_config(None, [
        "env.id=tests.toy_envs:CountingEnv", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=4", "runner.eval_every=2",
        "runner.eval_episodes=2", "runner.checkpoint_every=0", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", "env.preflight=false", "cluster.backend=local",
        f"experiment.output_dir={tmp_path}", *overrides,
    ])


def same_run(a, b) -> None:
    pa, pb = (load_checkpoint(r.checkpoint)["actor"]["policy"] for r in (a, b))
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    for ma, mb in zip(a.history, b.history, strict=True):
        for key in ("env_steps", "env/return", "train/loss"):
            assert ma.get(key) == mb.get(key), key
    assert a.final_eval == b.final_eval


def test_a_learner_drawing_from_the_global_generator_does_not_move_the_rollouts_draws(tmp_path, monkeypatch):
    plain = runner.train(toy_config(tmp_path / "plain"))
    original = ActorWorker.update

    def drawing_learner(self, trajectories, iteration):
        torch.nn.Linear(100, 100)  # a module built lazily: its init draws 10k numbers from the global generator
        return original(self, trajectories, iteration)

    monkeypatch.setattr(ActorWorker, "update", drawing_learner)
    same_run(plain, runner.train(toy_config(tmp_path / "lazy")))


def test_two_rollout_threads_acting_at_once_repeat_bit_for_bit(tmp_path):
    two = ("cluster.num_env_workers=2", "cluster.num_rollout_workers=2")
    same_run(runner.train(toy_config(tmp_path / "a", *two)), runner.train(toy_config(tmp_path / "b", *two)))

"""Every built-in off-policy algorithm resumes exactly: a run stopped at iteration 2 and resumed to 4 ends with the
parameters, optimizer state and metrics of the run that never stopped (the policy's optimizer included: DAgger's
learner keeps no copy of it, so a resume that dropped it went on with a fresh Adam)."""

from __future__ import annotations

import math

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import load_checkpoint
from embodied.config import load_config

COMMON = ["env.id=PickPlace-v0", "env.num_envs=2", "env.max_episode_steps=10", "env.vectorization=per_env",
          "env.preflight=false", "eval_env.num_envs=2", "policy.type=mlp", "policy.hidden_sizes=[8]",
          "rollout.chunk_steps=4", "algorithm.batch_size=4", "algorithm.learning_starts=4", "runner.eval_every=0",
          "runner.eval_episodes=2", "runner.checkpoint_every=2", "logger.backends=[console]",
          "logger.progress_bar=false", "runner.plot=false"]
ALGORITHMS = {
    "dagger": ["algorithm.name=dagger", "policy.action_chunk=1", "algorithm.demos=null"],
    "sac": ["algorithm.name=sac", "policy.action_chunk=2", "algorithm.critic_hidden_sizes=[8]"],
    "awac": ["algorithm.name=awac", "policy.action_chunk=2", "algorithm.critic_hidden_sizes=[8]"],
    "crossq": ["algorithm.name=crossq", "policy.action_chunk=2", "algorithm.critic_hidden_sizes=[8]"],
    "iql": ["algorithm.name=iql", "policy.action_chunk=2", "algorithm.critic_hidden_sizes=[8]",
            "algorithm.value_hidden_sizes=[8]"],
}


def TIMING(key: str) -> bool:
    """Wall-clock and memory figures, which no two runs share."""
    return key.startswith(("time", "sys/", "busy/")) or key.endswith(("sps", "_s", "/overlap", "/wait"))


def train(folder, *overrides):
    return runner.train(load_config(None, [*COMMON, f"experiment.output_dir={folder}", *overrides]))


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_an_off_policy_run_resumed_at_2_ends_as_the_run_that_never_stopped(tmp_path, name):
    whole = train(tmp_path / "whole", *ALGORITHMS[name], "runner.iterations=4")
    first = train(tmp_path / "parts", *ALGORITHMS[name], "runner.iterations=2")
    resumed = train(tmp_path / "parts", *ALGORITHMS[name], "runner.iterations=4", f"runner.resume_from={first.run_dir}")
    a, b = load_checkpoint(whole.checkpoint)["actor"], load_checkpoint(resumed.checkpoint)["actor"]
    assert same(a["policy"], b["policy"]), "policy parameters differ"
    assert same(a["optimizer"], b["optimizer"]), "the policy's optimizer state differs"
    for key in a:
        if key not in ("replay_dir", "policy_dir"):
            assert same(a[key], b[key]), key
    for mw, mr in zip(whole.history[2:], resumed.history, strict=True):
        assert mw.keys() == mr.keys()
        differ = [k for k in mw if not TIMING(k) and not same(mw[k], mr[k])]
        assert not differ, {k: (mw[k], mr[k]) for k in differ}

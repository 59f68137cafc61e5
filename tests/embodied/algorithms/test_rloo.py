"""RLOO (``algorithm.name: rloo``): GRPO's loop with leave-one-out advantages."""

from __future__ import annotations

import pytest
import torch

import embodied.runs.train as runner
from embodied.algorithms.grpo import group_advantages
from embodied.algorithms.rloo import RLOO, leave_one_out_advantages
from embodied.config import ConfigError, load_config


def test_each_advantage_is_the_score_minus_the_mean_of_the_others():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    adv, kept = leave_one_out_advantages(scores, 4)
    expected = torch.tensor([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 0, 0, 0, 0])
    torch.testing.assert_close(adv, expected)
    assert kept.tolist() == [True] * 4 + [False] * 4  # an all-equal group carries no signal
    assert float(adv[:4].sum()) == pytest.approx(0.0, abs=1e-12)  # a kept group's advantages sum to zero


def test_the_same_ranking_as_grpo_s_but_not_divided_by_the_spread():
    scores = torch.tensor([0.0, 0.1, 0.0, 0.1])  # outcomes that barely differ
    rloo, _ = leave_one_out_advantages(scores, 4)
    grpo, _ = group_advantages(scores, 4)
    assert torch.equal(rloo.argsort(), grpo.argsort())
    assert rloo.abs().max() < 0.1 < grpo.abs().max()  # GRPO blows them up to unit scale; RLOO keeps them small


def test_a_group_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        leave_one_out_advantages(torch.zeros(4), 3)


def test_rloo_trains_on_reach_and_logs_its_own_metrics(tmp_path):
    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=8", "env.max_episode_steps=10", "env.auto_reset=false",
                             "eval_env.num_envs=2", "policy.type=mlp", "policy.hidden_sizes=[8]",
                             "policy.action_chunk=2", "algorithm.name=rloo", "algorithm.group_size=4",
                             "rollout.chunk_steps=5", "runner.iterations=2", "runner.eval_every=0",
                             "runner.eval_episodes=2", "logger.backends=[]", "logger.progress_bar=false",
                             "runner.plot=false", f"experiment.output_dir={tmp_path}"])
    assert cfg.algorithm.algorithm_type() is RLOO
    result = runner.train(cfg)
    assert all(m["rloo/groups"] == 2.0 and "grpo/groups" not in m for m in result.history)


def test_rloo_refuses_what_grpo_refuses():
    with pytest.raises(ConfigError, match="algorithm.group_size: env.num_envs=6 is not a multiple of group_size=4"):
        load_config(None, ["env.id=Reach-v0", "env.num_envs=6", "env.auto_reset=false", "algorithm.name=rloo",
                           "algorithm.group_size=4"])

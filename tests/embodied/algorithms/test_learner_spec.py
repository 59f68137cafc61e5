"""Learners are built by one constructor (``build_learner``) from the run's ``LearnerSpec``; learners written to the
constructors of before run through an adapter that warns once."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.algorithms import base
from embodied.algorithms.base import LearnerSpec, build_learner
from embodied.algorithms.dagger import DAggerLearner
from embodied.algorithms.dagger_config import DAggerConfig
from embodied.algorithms.ppo import PPO
from embodied.algorithms.ppo_config import PPOConfig
from embodied.checkpoint.store import load_checkpoint
from embodied.config import load_config
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.mlp.modeling import MLPPolicy
from embodied.policy.config import PolicySpec
from embodied.runs.train import train
from embodied.workers import group

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "docs" / "examples"
SPEC = PolicySpec(state_dim=5, image_shape=(8, 8, 3), action_dim=2, action_low=(-1.0, -0.5),
                  action_high=(1.0, 0.5), wrist_image_shape=(8, 8, 3))


def test_the_spec_gives_the_chunk_s_space_with_the_env_s_bounds_and_the_observation_keys():
    spec = LearnerSpec(SPEC, 3, seed=4, lr=1e-3, total_iterations=10, num_ranks=2)
    assert spec.action_size == 6
    space = spec.action_space
    assert space.shape == (3, 2)
    np.testing.assert_array_equal(space.low, [[-1.0, -0.5]] * 3)
    np.testing.assert_array_equal(space.high, [[1.0, 0.5]] * 3)
    obs = spec.observation_space
    assert set(obs.spaces) == {"states", "main_images", "wrist_images"}
    assert obs["states"].shape == (5,) and obs["main_images"].dtype == np.uint8
    assert spec.device == torch.device("cpu")


def test_build_learner_builds_both_families_from_the_spec():
    spec = LearnerSpec(PolicySpec(5, None, 2, (-1.0,) * 2, (1.0,) * 2), 2, seed=7, lr=3e-3, total_iterations=1)
    ppo = build_learner(PPOConfig(), spec)
    assert type(ppo) is PPO
    assert torch.equal(ppo.generator.get_state(), torch.Generator().manual_seed(7).get_state())
    policy = MLPPolicy(MLPConfig(action_chunk=2, hidden_sizes=[8]), spec.policy)
    dagger = build_learner(DAggerConfig(), spec, policy)
    assert type(dagger) is DAggerLearner and dagger.policy is policy
    assert dagger.policy_optimizer.param_groups[0]["lr"] == 3e-3
    with pytest.raises(TypeError, match="off-policy learner; it is built around the policy"):
        build_learner(DAggerConfig(), spec)


class DAggerBeforeSpec(DAggerLearner):
    """DAgger's learner as an off-policy plug-in was written before LearnerSpec."""

    def __init__(self, policy, cfg, lr: float, action_size: int, seed: int) -> None:
        self.policy, self.cfg, self.got = policy, cfg, (lr, action_size, seed)
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.policy_optimizer = torch.optim.Adam(self.params, lr=lr)
        self.generator = torch.Generator().manual_seed(seed)


class DAggerBeforeSpecConfig(DAggerConfig):
    algorithm_class = "tests.embodied.algorithms.test_learner_spec:DAggerBeforeSpec"


def test_an_off_policy_learner_of_before_is_given_the_old_arguments_and_warned_about_once(monkeypatch):
    monkeypatch.setattr(base, "_WARNED", set())
    spec = LearnerSpec(PolicySpec(5, None, 2, (-1.0,) * 2, (1.0,) * 2), 2, seed=7, lr=3e-3, total_iterations=1)
    policy = MLPPolicy(MLPConfig(action_chunk=2, hidden_sizes=[8]), spec.policy)
    with pytest.warns(FutureWarning, match=r"DAggerBeforeSpec.__init__ takes \(lr, action_size, seed\).*take "
                                           r"\(policy, cfg, spec\).*docs/extending.md, \"The learner's constructor\""):
        learner = build_learner(DAggerBeforeSpecConfig(), spec, policy)
    assert learner.got == (3e-3, 4, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_learner(DAggerBeforeSpecConfig(), spec, policy)  # once per class


def test_the_guide_s_reinforce_of_before_trains_through_the_adapter_exactly_as_today_s(tmp_path, monkeypatch):
    """docs/examples/my_algo/reinforce.py as the guide showed it (``__init__(cfg, seed)``) trains Reach through
    the adapter, warning once, and gives today's example's weights to the last bit."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(base, "_WARNED", set())
    monkeypatch.setattr(group, "_WARNED", set())
    tiny = ["env.num_envs=4", "env.max_episode_steps=10", "eval_env.num_envs=2", "runner.eval_episodes=2",
            "runner.iterations=2", "runner.eval_every=0", "logger.backends=[]", "logger.progress_bar=false",
            "runner.plot=false", "policy.action_chunk=2", "rollout.chunk_steps=5"]
    recipe = EXAMPLES / "reach_reinforce.yaml"
    today = train(load_config(recipe, [*tiny, f"experiment.output_dir={tmp_path / 'today'}"]))
    old = "algorithm.name=tests.embodied.algorithms.legacy.reinforce_before_spec:ReinforceBeforeSpecConfig"
    with pytest.warns(FutureWarning) as warned:
        before = train(load_config(recipe, [*tiny, old, f"experiment.output_dir={tmp_path / 'before'}"]))
    said = [str(w.message) for w in warned if issubclass(w.category, FutureWarning)]
    assert any("reinforce_before_spec.Reinforce.__init__ takes (seed)" in s for s in said)
    assert any("Reinforce.rollout_reset: how envs start a rollout epoch is now the config's" in s for s in said)
    a, b = (load_checkpoint(r.checkpoint)["actor"]["policy"] for r in (today, before))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_guide_s_td3_of_before_trains_through_the_step_adapter_exactly_as_today_s(tmp_path, monkeypatch):
    """docs/examples/my_algo/td3.py as the guide showed it (``rank_modules()``, ``step(batch, ranks, train_policy,
    demo_rows)``) trains Reach through ``StepLearner``, warning once, and gives today's example's weights (``join``,
    ``update(batch)``) to the last bit, a critic warm-up included."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr(base, "_WARNED", set())
    tiny = ["env.num_envs=4", "env.max_episode_steps=10", "eval_env.num_envs=2", "runner.eval_episodes=2",
            "runner.iterations=3", "runner.eval_every=0", "logger.backends=[]", "logger.progress_bar=false",
            "runner.plot=false", "algorithm.batch_size=16", "algorithm.learning_starts=16", "rollout.chunk_steps=4",
            "algorithm.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "algorithm.critic_warmup_iterations=1"]
    recipe = EXAMPLES / "reach_td3.yaml"
    today = train(load_config(recipe, [*tiny, f"experiment.output_dir={tmp_path / 'today'}"]))
    old = "algorithm.name=tests.embodied.algorithms.legacy.td3_step:TD3StepConfig"
    with pytest.warns(FutureWarning, match=r"td3_step.TD3 defines step\(batch, ranks, train_policy, demo_rows\)"):
        before = train(load_config(recipe, [*tiny, old, f"experiment.output_dir={tmp_path / 'before'}"]))
    a, b = (load_checkpoint(r.checkpoint)["actor"] for r in (today, before))
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert a["td3"]["steps"] == b["td3"]["steps"] > 0
    assert any("td3/actor_loss" in row for row in today.history)

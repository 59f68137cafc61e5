"""DAgger's learner and config: the expert's labels on visited states, the supervised step, and what is refused."""

from __future__ import annotations

import pytest
import torch

from embodied.algorithms.base import LearnerSpec
from embodied.algorithms.dagger import DAggerLearner, pack, unpack
from embodied.algorithms.dagger_config import DAggerConfig
from embodied.algorithms.transitions import ReplaySample
from embodied.config import ConfigError, load_config
from embodied.policies.mlp.configuration import MLPConfig
from embodied.policies.mlp.modeling import MLPPolicy
from embodied.policy.base import PolicySpec

SPEC = PolicySpec(state_dim=5, image_shape=None, action_dim=3, action_low=(-1.0,) * 3, action_high=(1.0,) * 3)


def policy() -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPConfig(action_chunk=2, hidden_sizes=[32, 32]), SPEC)


def batch(labels: torch.Tensor, executed: torch.Tensor, states: torch.Tensor) -> ReplaySample:
    n = len(labels)
    return ReplaySample(obs={"states": states}, actions=pack(labels, executed), reward=torch.zeros(n),
                        discount=torch.ones(n), bootstrap=torch.ones(n, dtype=torch.bool), next_obs={"states": states})


def test_pack_keeps_labels_and_the_executed_mask():
    labels = torch.randn(4, 2, 3)
    executed = torch.tensor([[True, True], [True, False], [True, True], [False, False]])
    back, mask = unpack(pack(labels, executed))
    assert torch.equal(back, labels) and torch.equal(mask, executed)


def test_steps_fit_the_labels_of_the_sub_steps_that_ran():
    p = policy()
    learner = DAggerLearner(p, DAggerConfig(max_grad_norm=10.0), LearnerSpec(SPEC, 2, 0, 3e-3, 1))
    g = torch.Generator().manual_seed(1)
    states = torch.randn(64, 5, generator=g)
    labels = torch.tanh(states[:, :3])[:, None, :].repeat(1, 2, 1)  # a function of the state
    executed = torch.ones(64, 2, dtype=torch.bool)
    executed[::2, 1] = False
    given = torch.where(executed[..., None], labels, 0.0)  # 0 where nothing ran, as labelled_chunk_step gives
    first = learner.update(batch(given, executed, states))["dagger/policy_loss"]
    for _ in range(300):
        last = learner.update(batch(given, executed, states))["dagger/policy_loss"]
    assert last < first - 2
    with torch.no_grad():
        mean = p.act({"states": states.numpy()}, deterministic=True).actions
    assert (mean - labels).abs()[executed].mean() < 0.1


def test_a_trajectory_without_labels_is_named():
    from embodied.core.types import Trajectory

    t = torch.zeros
    trajectory = Trajectory(forward_inputs={}, actions=t(1, 1, 2, 3), logprobs=t(1, 1), values=t(1, 1),
                            rewards=t(1, 1, 2), executed=t(1, 1, 2, dtype=torch.bool), dones=t(1, 1, dtype=torch.bool),
                            terminated=t(1, 1, dtype=torch.bool), final_values=t(1, 1), next_values=t(1), version=0)
    learner = DAggerLearner(policy(), DAggerConfig(), LearnerSpec(SPEC, 2, 0, 1e-3, 1))
    with pytest.raises(ValueError, match="carries no expert labels"):
        learner.replay_actions(trajectory)
    trajectory.expert_actions = torch.ones(1, 1, 2, 3)
    assert learner.replay_actions(trajectory).shape == (1, 1, 2, 4)


def test_the_config_asks_for_labels_and_refuses_what_dagger_does_not_use():
    cfg = load_config(None, ["algorithm.name=dagger", "env.vectorization=per_env", "algorithm.beta=0.5",
                             "algorithm.beta_decay=0.5"])
    labels = cfg.algorithm.expert_labels()
    assert [labels.mix_at(i) for i in (1, 2, 3)] == [0.5, 0.25, 0.125]
    assert cfg.algorithm.off_policy and not cfg.algorithm.needs_q_functions
    assert cfg.algorithm.replay_returns() == (1.0, 1) and cfg.algorithm.warmup_iterations() == 0
    for field in ("gamma", "n_step", "critic_warmup_iterations", "target_kl"):
        with pytest.raises(ConfigError, match=f"algorithm.{field}: not a field of algorithm 'dagger'"):
            load_config(None, ["algorithm.name=dagger", "env.vectorization=per_env", f"algorithm.{field}=1"])
    with pytest.raises(ConfigError, match="env.vectorization: algorithm.name=dagger labels every visited state"):
        load_config(None, ["algorithm.name=dagger"])
    with pytest.raises(ConfigError, match=r"algorithm.beta: the expert's share of chunks must be in \[0, 1\]"):
        load_config(None, ["algorithm.name=dagger", "env.vectorization=per_env", "algorithm.beta=2"])

"""IQL (``algorithm.name: iql``): an expectile value, Q towards it, the policy by advantage-weighted regression onto
replay's own chunks; its checks refuse what it cannot run."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from embodied.algorithms.base import LearnerSpec, build_learner
from embodied.algorithms.iql import IQLLearner, expectile_loss
from embodied.algorithms.transitions import ReplaySample
from embodied.config import ConfigError, load_config
from embodied.policy.base import build_policy
from embodied.policy.config import PolicySpec

SPEC = PolicySpec(state_dim=4, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)
TINY = ["env.id=Reach-v0", "policy.type=mlp", "policy.hidden_sizes=[16]", "policy.action_chunk=2",
        "algorithm.name=iql", "algorithm.critic_hidden_sizes=[32, 32]", "algorithm.value_hidden_sizes=[32]",
        "algorithm.batch_size=16"]


@pytest.mark.parametrize("expectile", [0.5, 0.7, 0.9])
def test_the_expectile_loss_is_minimised_by_the_expectile(expectile):
    q = torch.randn(4000, generator=torch.Generator().manual_seed(0))
    v = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([v], lr=0.05)
    for _ in range(600):
        opt.zero_grad()
        expectile_loss(q - v, expectile).backward()
        opt.step()
    found = v.item()
    if expectile == 0.5:
        assert found == pytest.approx(float(q.mean()), abs=0.02)
    else:  # an upper expectile lies above the mean, below the max
        assert float(q.mean()) + 0.1 < found < float(q.max())


def learner(*overrides: str) -> IQLLearner:
    cfg = load_config(None, [*TINY, *overrides])
    torch.manual_seed(0)
    policy = build_policy(cfg.algorithm.worker_policy(cfg.policy), SPEC)
    out = build_learner(cfg.algorithm, LearnerSpec(SPEC, 2, 0, 1e-3, 1), policy)
    assert type(out) is IQLLearner
    return out


def batch(i: int) -> ReplaySample:
    g = torch.Generator().manual_seed(i)
    return ReplaySample(obs={"states": torch.randn(16, 4, generator=g)},
                        actions=torch.rand(16, 2, 2, generator=g) * 2 - 1, reward=torch.randn(16, generator=g),
                        discount=torch.full((16,), 0.97), bootstrap=torch.rand(16, generator=g) < 0.9,
                        next_obs={"states": torch.randn(16, 4, generator=g)})


def weights(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_a_step_moves_v_q_and_the_policy_and_warm_up_holds_the_policy():
    lr = learner("algorithm.critic_warmup_iterations=1")
    pol, val, crit = weights(lr.policy), weights(lr.value), weights(lr.critics)
    stats = lr.update(batch(0))  # iteration 1: the warm-up
    assert {"iql/v_loss", "iql/q_loss", "iql/policy_loss", "iql/advantage_mean"} <= set(stats)
    assert all(torch.equal(a, b) for a, b in zip(pol, weights(lr.policy)))  # warm-up: the policy holds
    assert not all(torch.equal(a, b) for a, b in zip(val, weights(lr.value)))
    assert not all(torch.equal(a, b) for a, b in zip(crit, weights(lr.critics)))
    lr.update(dataclasses.replace(batch(1), iteration=2))
    assert not all(torch.equal(a, b) for a, b in zip(pol, weights(lr.policy)))


def test_the_policy_never_asks_the_critics_about_its_own_chunks(monkeypatch):
    """IQL's point: Q is read at replay's chunks only; the policy is never sampled in a step."""
    lr = learner()
    monkeypatch.setattr(type(lr.policy), "sample_with_logprob",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("sampled the policy")))
    lr.update(batch(0))


def test_a_learner_resumed_from_its_state_steps_as_the_one_that_never_stopped():
    whole, parts = learner(), learner()
    for i in range(2):
        whole.update(batch(i))
        parts.update(batch(i))
    resumed = learner()
    resumed.policy.load_state_dict(parts.policy.state_dict())
    resumed.load_state_dict(parts.state_dict())
    for i in range(2, 4):
        assert resumed.update(batch(i)) == whole.update(batch(i))


@pytest.mark.parametrize("override, words", [
    ("algorithm.expectile=1.0", "algorithm.expectile: V's expectile must be in"),
    ("algorithm.awr_temperature=0", "algorithm.awr_temperature"),
    ("algorithm.value_hidden_sizes=[]", "algorithm.value_hidden_sizes")])
def test_bad_fields_are_refused_naming_the_field(override, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, [*TINY, override])

"""CrossQ (``algorithm.name: crossq``): batch-normalised critics on one joint pass of current and next rows, no
target networks, a delayed policy; its checks refuse what it cannot run."""

from __future__ import annotations

import pytest
import torch

from embodied.algorithms.base import LearnerSpec, build_learner
from embodied.algorithms.crossq import BatchNormQEnsemble, CrossQLearner, EnsembleBatchNorm
from embodied.algorithms.crossq_config import CrossQConfig
from embodied.algorithms.transitions import ReplaySample
from embodied.config import ConfigError, load_config
from embodied.policy.base import build_policy
from embodied.policy.config import PolicySpec

SPEC = PolicySpec(state_dim=4, image_shape=None, action_dim=2, action_low=(-1.0,) * 2, action_high=(1.0,) * 2)
TINY = ["env.id=Reach-v0", "policy.type=mlp", "policy.hidden_sizes=[16]", "policy.action_chunk=2",
        "algorithm.name=crossq", "algorithm.critic_hidden_sizes=[32, 32]", "algorithm.batch_size=16"]


def test_ensemble_batch_norm_is_torch_s_batch_norm_per_critic():
    torch.manual_seed(0)
    norm = EnsembleBatchNorm(3, 5, momentum=0.1, eps=1e-3)
    ours = [torch.nn.BatchNorm1d(5, eps=1e-3, momentum=0.1) for _ in range(3)]
    for _ in range(4):
        h = torch.randn(3, 32, 5) * 2 + 1
        out = norm(h)
        for e in range(3):
            torch.testing.assert_close(out[e], ours[e](h[e]))
    norm.eval()
    h = torch.randn(3, 7, 5)
    for e in range(3):
        ours[e].eval()
        torch.testing.assert_close(norm(h)[e], ours[e](h[e]))
        torch.testing.assert_close(norm.running_var[e, 0], ours[e].running_var)


def learner(seed: int = 0, warmup: int = 0) -> CrossQLearner:
    cfg = load_config(None, [*TINY, f"algorithm.critic_warmup_iterations={warmup}"]).algorithm
    torch.manual_seed(seed)
    policy = build_policy(cfg.worker_policy(load_config(None, TINY).policy), SPEC)
    out = build_learner(cfg, LearnerSpec(SPEC, 2, seed, 1e-3, 1), policy)
    assert type(out) is CrossQLearner
    return out


def batch(i: int) -> ReplaySample:
    g = torch.Generator().manual_seed(i)
    return ReplaySample(obs={"states": torch.randn(16, 4, generator=g)},
                        actions=torch.rand(16, 2, 2, generator=g) * 2 - 1, reward=torch.randn(16, generator=g),
                        discount=torch.full((16,), 0.97), bootstrap=torch.rand(16, generator=g) < 0.9,
                        next_obs={"states": torch.randn(16, 4, generator=g)})


def policy_weights(lr: CrossQLearner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in lr.policy_params]


def test_no_target_networks_and_the_policy_steps_every_policy_delay_critic_steps():
    lr = learner()
    assert not hasattr(lr, "target_critics") and isinstance(lr.critics, BatchNormQEnsemble)
    assert lr.critic_optimizer.param_groups[0]["betas"][0] == 0.5
    moved = []
    for i in range(6):
        before = policy_weights(lr)
        stats = lr.update(batch(i))
        moved.append(any(not torch.equal(a, b) for a, b in zip(before, policy_weights(lr))))
        assert ("crossq/policy_loss" in stats) == moved[-1]
    assert moved == [False, False, True, False, False, True]  # policy_delay 3
    assert not torch.allclose(lr.critics.norms[0].running_mean, torch.zeros_like(lr.critics.norms[0].running_mean))


def test_critic_warm_up_never_steps_the_policy():
    lr = learner(warmup=1)
    before = policy_weights(lr)
    for i in range(4):
        lr.update(batch(i))  # iteration 1: the warm-up
    assert all(torch.equal(a, b) for a, b in zip(before, policy_weights(lr)))


def test_a_learner_resumed_from_its_state_steps_as_the_one_that_never_stopped():
    whole, parts = learner(), learner()
    for i in range(2):
        whole.update(batch(i))
        parts.update(batch(i))
    state = parts.state_dict()
    resumed = learner(seed=9)  # other weights and stream: all come from the state
    resumed.policy.load_state_dict(parts.policy.state_dict())
    resumed.load_state_dict(state)
    for i in range(2, 5):
        assert resumed.update(batch(i)) == whole.update(batch(i))
    for a, b in zip(whole.critics.state_dict().values(), resumed.critics.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the running statistics too
    assert all(torch.equal(a, b) for a, b in zip(policy_weights(whole), policy_weights(resumed), strict=True))


@pytest.mark.parametrize("override, words", [
    ("algorithm.critic_layernorm=true", "CrossQ's critics are batch-normalised"),
    ("algorithm.policy_delay=0", "algorithm.policy_delay: critic steps per policy step must be >= 1"),
    ("algorithm.bn_momentum=0", "algorithm.bn_momentum: the running statistics' rate must be in (0, 1]"),
    ("algorithm.adam_beta1=1", "algorithm.adam_beta1"),
    ("algorithm.batch_size=1", "batch normalisation needs at least 2 rows")])
def test_bad_fields_are_refused_naming_the_field(override, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        load_config(None, [*TINY, override])


def test_the_config_is_crossq_s_with_sac_s_fields():
    cfg = load_config(None, TINY).algorithm
    assert isinstance(cfg, CrossQConfig) and cfg.critic_hidden_sizes == [32, 32] and cfg.policy_delay == 3

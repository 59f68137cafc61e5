"""Critic warm-up on policies whose value head sits on a shared trunk (a VLA backbone, a CNN encoder):
the value loss must not move anything that acts, or the policy changes before warm-up ends."""

from __future__ import annotations

import pytest
import torch

from embodied.algorithms.ppo_config import PPOConfig
from embodied.config import ActorConfig
from embodied.core.types import Trajectory
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policies.vla.configuration import VLAConfig
from embodied.policy.base import Policy
from embodied.workers.actor_worker import ActorWorker
from tests.policies import test_cnn, test_vla


def rollout(policy: Policy, obs: dict, steps: int = 2) -> Trajectory:
    """A trajectory of ``steps`` chunk steps acted by ``policy``, with rewards that the values do not predict."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        outs = [policy.act(obs) for _ in range(steps)]
    n, chunk = outs[0].actions.shape[:2]
    stack = lambda key: torch.stack([getattr(o, key) for o in outs])  # noqa: E731
    done = torch.zeros(steps, n, dtype=torch.bool)
    return Trajectory(
        forward_inputs={k: torch.stack([o.forward_inputs[k] for o in outs]) for k in outs[0].forward_inputs},
        actions=stack("actions"), logprobs=stack("logprobs"), values=stack("values"),
        rewards=torch.randn(steps, n, chunk, generator=g), executed=torch.ones(steps, n, chunk, dtype=torch.bool),
        dones=done, terminated=done, final_values=torch.zeros(steps, n), next_values=torch.zeros(n), version=0)


CASES = {  # the policy, its env, observations, and the value head the probe must find (no policy declares it)
    "vla": (lambda: VLAConfig(model_path="tiny:smolvlm-tiny", action_chunk=2), test_vla.spec(),
            lambda: test_vla.observations(4), "value_head."),
    "cnn": (lambda: CNNConfig(action_chunk=test_cnn.C, **test_cnn.SMALL), test_cnn.WRIST, lambda: test_cnn.obs(4),
            "critic."),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_warmup_steps_the_value_head_alone_then_everything_trains(kind):
    config, spec, obs, prefix = CASES[kind]
    actor = ActorWorker(config(), spec, PPOConfig(critic_warmup_iterations=1, update_epochs=1, num_minibatches=2,
                                                  anneal_lr=False, lr=1e-3),
                        ActorConfig(), total_iterations=2, seed=0)
    head = {name for name, p in actor.policy.named_parameters() if p.requires_grad and name.startswith(prefix)}
    assert head and len(head) < sum(1 for _ in actor.policy.parameters())
    assert actor.training.value_names == head  # found by the probe, declared by no one
    before = {k: v.clone() for k, v in actor.policy.state_dict().items()}
    batch = rollout(actor.policy, obs())

    metrics = actor.update([batch], iteration=1)
    assert metrics["train/critic_warmup"] == 1.0
    after = actor.policy.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and moved <= head  # the value head learnt; the trunk and the action head did not move

    actor.update([batch], iteration=2)
    moved = {k for k in before if not torch.equal(before[k], actor.policy.state_dict()[k])}
    assert moved - head  # after warm-up the policy trains as well


def test_warmup_on_a_policy_whose_value_has_no_parameters_of_its_own_is_refused(monkeypatch):
    from embodied.policies.cnn.modeling import CNNPolicy

    evaluate = CNNPolicy.evaluate

    def value_from_the_actions(self, forward_inputs, actions):  # V read off the log-probs: no head of its own
        logprobs, entropy, _ = evaluate(self, forward_inputs, actions)
        return logprobs, entropy, logprobs.detach() * 0 + logprobs

    monkeypatch.setattr(CNNPolicy, "evaluate", value_from_the_actions)
    with pytest.raises(ValueError, match=r"critic_warmup_iterations=3: policy.type=cnn \(CNNPolicy\) has no parameter"):
        ActorWorker(CNNConfig(action_chunk=test_cnn.C, **test_cnn.SMALL), test_cnn.WRIST,
                    PPOConfig(critic_warmup_iterations=3), ActorConfig(), total_iterations=2, seed=0)

"""SAC's actor over the CNN policy's encoder (policy.type: cnn under SAC) and the learner around it: the encoder's gradients come from the
critics' loss only, the Q-ensemble is one batched pass, the target encoder follows by polyak, images stay uint8."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.algorithms.base import LearnerSpec
from embodied.algorithms.sac import ReplaySample, SACLearner, policy_loss, critic_loss
from embodied.algorithms.sac_config import SACConfig
from embodied.algorithms.sac_networks import EnsembleLinear, build_critics
from embodied.config import ConfigError, load_config
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES, Trajectory
from embodied.algorithms.sac_actor import TanhGaussianActor
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policy.base import PolicySpec, build_policy
from embodied.policy.q_functions import QFunctionPolicy, require_q_functions
from embodied.replay.buffer import ReplayBuffer
from tests.policies.test_cnn import IMAGE, SPECS, expected_keys, obs

B, C, A = 6, 2, 3
SMALL = dict(channels=[8, 16], kernel_sizes=[8, 4], strides=[4, 2], image_features=32, state_features=16,
             hidden_sizes=[32])
SPEC = SPECS["state+rgb+wrist"]
RECIPE = Path(__file__).resolve().parents[3] / "configs" / "reach_cnn_sac.yaml"


def actor_config(**kwargs):
    """The config SAC trains for ``policy.type: cnn`` with ``kwargs``."""
    return SACConfig().trained_policy(CNNConfig(action_chunk=C, **{**SMALL, **kwargs}))


def make(spec: PolicySpec = SPEC, **kwargs) -> TanhGaussianActor:
    torch.manual_seed(0)
    return TanhGaussianActor(actor_config(**kwargs), spec)


def batch(seed: int = 0, n: int = B) -> ReplaySample:
    """A replay batch as ``ReplayBuffer.sample`` gives it: torch tensors, images uint8."""
    g = torch.Generator().manual_seed(seed)
    as_torch = lambda o: {k: torch.as_tensor(v) for k, v in o.items() if k != "task_descriptions"}  # noqa: E731
    return ReplaySample(obs=as_torch(obs(n, seed)), actions=torch.rand(n, C, A, generator=g) * 2 - 1,
                        reward=torch.randn(n, generator=g), discount=torch.full((n,), 0.97),
                        bootstrap=torch.rand(n, generator=g) < 0.8, next_obs=as_torch(obs(n, seed + 100)))


def learner(policy: TanhGaussianActor, **overrides) -> SACLearner:
    cfg = SACConfig(num_critics=4, critic_subset=2, critic_layernorm=True, critic_hidden_sizes=[32, 32], **overrides)
    return SACLearner(policy, cfg, LearnerSpec(SPEC, C, 0, 1e-3, 1))


def test_it_has_the_q_function_protocol_and_builds_by_name():
    assert isinstance(make(), QFunctionPolicy)
    require_q_functions(actor_config(), "sac")  # no error
    cfg = load_config(None, ["policy.type=cnn", "policy.channels=[8, 16]", "policy.kernel_sizes=[8, 4]",
                             "policy.strides=[4, 2]", "env.obs_mode=rgb", "algorithm.name=sac"])
    assert isinstance(cfg.policy, CNNConfig) and cfg.algorithm.image_shift == 4
    assert isinstance(build_policy(cfg.algorithm.trained_policy(cfg.policy), SPEC), TanhGaussianActor)


@pytest.mark.parametrize("mode", SPECS)
def test_act_keeps_images_uint8_and_actions_in_bounds(mode):
    spec = dataclasses.replace(SPECS[mode], action_low=(-1.0, 0.0, -2.0), action_high=(1.0, 4.0, 2.0))
    policy = make(spec)
    out = policy.act(obs(B))
    assert out.actions.shape == (B, C, A) and out.logprobs.shape == (B,) and not out.values.any()
    assert set(out.forward_inputs) == expected_keys(spec)
    for key in (MAIN_IMAGES, WRIST_IMAGES):
        if key in out.forward_inputs:
            assert out.forward_inputs[key].dtype == torch.uint8  # normalised inside the encoder, not before
    low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
    assert bool(((out.actions >= low) & (out.actions <= high)).all())
    greedy = policy.act(obs(B), deterministic=True).actions
    assert torch.equal(greedy, policy.act(obs(B), deterministic=True).actions)
    with torch.no_grad():
        replayed, _, _ = policy.evaluate(out.forward_inputs, out.actions)
    assert torch.allclose(replayed, out.logprobs, atol=1e-3)


def test_the_q_ensemble_is_one_batched_pass_over_the_encoder_features():
    policy = make()
    critics = build_critics(policy, 5, [32, 32], layernorm=True)
    assert all(isinstance(layer, EnsembleLinear) for layer in critics.layers) and len(critics.norms) == 4
    features = policy.feature_encoder(policy.forward_inputs(obs(B)))
    assert features.shape == (B, 2 * SMALL["image_features"] + SMALL["state_features"])
    q = critics.q_values(features, torch.zeros(B, C, A))
    assert q.shape == (5, B)
    assert not build_critics(make(), 2, [32, 32], layernorm=False).norms  # critic_layernorm off: none


def encoder_grads(policy: TanhGaussianActor) -> list[torch.Tensor | None]:
    return [p.grad for p in policy.feature_encoder.parameters()]


def test_policy_loss_gives_the_encoder_no_gradient_and_critic_loss_does():
    policy = make()
    sac = learner(policy)
    inputs = sac.inputs(batch().obs)
    features = sac.encoder(inputs)
    actions, logprob = policy.sample_with_logprob(features.detach(), sac.generator)
    policy_loss(sac.critics.q_values(features.detach(), actions), logprob, 0.1).backward()
    assert all(g is None for g in encoder_grads(policy))
    assert policy.trunk[0].weight.grad is not None and policy.trunk[0].weight.grad.abs().sum() > 0
    critic_loss(sac.critics.q_values(features, batch().actions), torch.zeros(B)).backward()
    grads = encoder_grads(policy)
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0


def test_the_learner_steps_the_encoder_with_the_critics_only():
    policy = make()
    sac = learner(policy)
    encoder = {id(p) for p in policy.feature_encoder.parameters()}
    assert encoder and not encoder & {id(p) for p in sac.policy_params}  # the policy's optimizer leaves it
    assert encoder <= {id(p) for group in sac.critic_optimizer.param_groups for p in group["params"]}
    # Every backward pass that reaches a parameter calls its hook: the encoder's once a step (the critics' loss),
    # the actor's once (its own loss).
    calls = {"encoder": 0, "actor": 0}
    for p in policy.feature_encoder.parameters():
        p.register_hook(lambda g: calls.__setitem__("encoder", calls["encoder"] + 1))
    policy.mean_head.weight.register_hook(lambda g: calls.__setitem__("actor", calls["actor"] + 1))
    before = {k: v.clone() for k, v in policy.feature_encoder.state_dict().items()}
    sac.update(batch())
    assert calls == {"encoder": len(encoder), "actor": 1}
    after = policy.feature_encoder.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in before if k.endswith("weight"))


def test_the_target_encoder_is_a_polyak_copy():
    policy = make()
    sac = learner(policy, tau=0.25)
    assert sac.target_encoder is not sac.encoder and not any(p.requires_grad for p in sac.target_encoder.parameters())
    target = {k: v.clone() for k, v in sac.target_encoder.state_dict().items()}
    assert all(torch.equal(v, sac.encoder.state_dict()[k]) for k, v in target.items())  # starts equal
    sac.update(batch())
    online = sac.encoder.state_dict()
    for key, old in target.items():
        assert torch.allclose(sac.target_encoder.state_dict()[key], 0.75 * old + 0.25 * online[key], atol=1e-6)
    assert "target_encoder" in sac.state_dict()


def test_update_batches_are_shifted_and_independently_for_obs_and_next_obs():
    policy = make()
    b = batch()
    b.next_obs = {k: v.clone() for k, v in b.obs.items()}  # the same images: only the draws differ
    sac = learner(policy)
    inputs, next_inputs = sac.inputs(b.obs), sac.inputs(b.next_obs)
    for key in (MAIN_IMAGES, WRIST_IMAGES):
        assert inputs[key].dtype == torch.uint8 and inputs[key].shape == b.obs[key].shape
        assert not torch.equal(inputs[key], b.obs[key]) and not torch.equal(inputs[key], next_inputs[key])
    assert torch.equal(inputs[STATES], b.obs[STATES])  # states are not images
    off = learner(policy, image_shift=0)
    assert all(torch.equal(off.inputs(b.obs)[k], b.obs[k]) for k in (MAIN_IMAGES, WRIST_IMAGES))


def test_steps_are_exact_given_the_learner_state():
    first, second = learner(make()), learner(make())
    first.update(batch(1))
    second.policy.load_state_dict(copy.deepcopy(first.policy.state_dict()))
    second.load_state_dict(copy.deepcopy(first.state_dict()))  # as a checkpoint holds it, sharing no storage
    a, b = first.update(batch(2)), second.update(batch(2))
    assert a == b
    targets = second.target_encoder.state_dict()
    assert all(torch.equal(v, targets[k]) for k, v in first.target_encoder.state_dict().items())


def test_replay_keeps_images_uint8():
    n, t = 3, 2
    frames = torch.randint(0, 256, (t + 1, n, *IMAGE), dtype=torch.uint8)
    trajectory = Trajectory(
        forward_inputs={}, actions=torch.zeros(t, n, C, A), logprobs=torch.zeros(t, n), values=torch.zeros(t, n),
        rewards=torch.zeros(t, n, C), executed=torch.ones(t, n, C, dtype=torch.bool),
        dones=torch.zeros(t, n, dtype=torch.bool), terminated=torch.zeros(t, n, dtype=torch.bool),
        final_values=torch.zeros(t, n), next_values=torch.zeros(n), version=0,
        observations={MAIN_IMAGES: frames[:-1]}, next_observations={MAIN_IMAGES: frames[1:]})
    replay = ReplayBuffer(16)
    replay.add(trajectory, 0.99)
    assert replay.storage["obs/main_images"].dtype == torch.uint8
    sample = replay.sample(4, torch.Generator().manual_seed(0))
    assert sample.obs[MAIN_IMAGES].dtype == sample.next_obs[MAIN_IMAGES].dtype == torch.uint8


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match=r"algorithm\.image_shift"):
        load_config(RECIPE, ["algorithm.image_shift=-1"])
    with pytest.raises(ConfigError, match=r"algorithm\.critic_hidden_sizes"):
        load_config(RECIPE, ["algorithm.critic_hidden_sizes=[]"])
    with pytest.raises(ConfigError, match=r"algorithm\.log_std_min"):
        load_config(RECIPE, ["policy.type=cnn_sac", "policy.log_std_min=3"])  # the alias's head fields: SAC's
    with pytest.raises(ConfigError, match=r"policy\.channels, policy\.kernel_sizes"):
        load_config(RECIPE, ["policy.channels=[8]"])
    with pytest.raises(ConfigError, match=r"env\.obs_mode.*cnn needs images"):
        load_config(RECIPE, ["env.obs_mode=state"])
    with pytest.raises(ValueError, match=r"policy\.type=cnn needs image observations"):
        make(dataclasses.replace(SPEC, image_shape=None, wrist_image_shape=None))
    assert load_config(RECIPE, ["algorithm.image_shift=0"]).algorithm.image_shift == 0



def test_joining_actor_ranks_starts_every_learner_copy_from_rank_0(monkeypatch):
    """join_group broadcasts each module the learner keeps a copy of: the policy (the encoder inside it), the critics,
    their targets and the target encoder, which is deep-copied from this rank's encoder before the group exists."""
    from embodied.workers import actor_worker

    prepared: list[torch.nn.Module] = []

    class Recorder:
        def __init__(self, *args) -> None:
            pass

        def prepare(self, module: torch.nn.Module) -> None:
            prepared.append(module)

    monkeypatch.setattr(actor_worker, "ProcessGroup", Recorder)
    cfg = load_config(RECIPE, ["policy.channels=[8, 16]", "policy.kernel_sizes=[8, 4]", "policy.strides=[4, 2]",
                               "policy.image_features=16", "policy.hidden_sizes=[16]",
                               "algorithm.critic_hidden_sizes=[16]", "algorithm.batch_size=4"])
    spec = dataclasses.replace(SPECS["rgb"], action_low=(-1.0,) * SPECS["rgb"].action_dim,
                               action_high=(1.0,) * SPECS["rgb"].action_dim)
    worker = actor_worker.ActorWorker(cfg.algorithm.worker_policy(cfg.policy), spec, cfg.algorithm, cfg.actor, 1,
                                      seed=0)
    worker.join_group(1, 2, "127.0.0.1:0")
    learner = worker.learner
    assert [id(m) for m in prepared] == [id(m) for m in (worker.policy, learner.critics, learner.target_critics,
                                                         learner.target_encoder)]
    assert any(True for _ in learner.target_encoder.parameters())  # a CNN's: weights to broadcast

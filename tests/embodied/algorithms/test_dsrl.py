"""DSRL's pieces: the noise policy's bound, the frozen flow policy's ODE from a given noise (equal to its own greedy
loop), features recorded for replay, updates that move only the noise policy and the critics, a weight sync of the
noise policy's tensors alone, and the bad input named before any worker starts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from embodied.algorithms.dsrl import FEATURES, NOISE, DSRLLearner, DSRLPolicy, DSRLPolicyConfig
from embodied.config import ConfigError, load_config
from embodied.core.types import Trajectory
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policies.vla.configuration import VLAConfig
from embodied.workers.actor_worker import ActorWorker
from tests.policies.test_pi0 import SPEC as PI0_SPEC
from tests.policies.test_pi0 import observations as pi0_observations
from tests.policies.test_vla import observations, spec

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
RECIPE = CONFIGS / "pick_color_tinyvla_flow_dsrl.yaml"
TINY = ["policy.flow_width=64", "policy.flow_depth=2", "policy.flow_heads=2", "policy.flow_steps=3",
        "algorithm.noise_policy_hidden_sizes=[16]", "algorithm.critic_hidden_sizes=[16]",
        "algorithm.batch_size=4", "algorithm.learning_starts=4", "algorithm.noise_scale=0.5", "policy.device=cpu"]
pytestmark = pytest.mark.filterwarnings("ignore:algorithm.name=dsrl without policy.init_from")


def dsrl_config(*overrides: str) -> DSRLPolicyConfig:
    cfg = load_config(RECIPE, [*TINY, *overrides])
    policy = cfg.algorithm.worker_policy(cfg.policy)
    assert isinstance(policy, DSRLPolicyConfig) and isinstance(policy.frozen, VLAConfig)
    return policy


@pytest.fixture(scope="module")
def policy() -> DSRLPolicy:
    torch.manual_seed(0)
    return DSRLPolicy(dsrl_config(), spec())


def test_the_noise_is_bounded_by_noise_scale_and_greedy_is_tanh_of_the_mean_times_it(policy):
    obs = observations(6)
    torch.manual_seed(1)
    out = policy.act(obs)
    noise = out.forward_inputs[NOISE]
    assert noise.shape == (6, 4, 4)  # the flow head's whole noise [C, A]
    assert noise.abs().max() < 0.5 and noise.abs().max() > 0.0
    greedy = policy.act(obs, deterministic=True)
    mean = policy.noise_policy._dist(greedy.forward_inputs[FEATURES]).mean  # type: ignore[attr-defined]
    assert torch.allclose(greedy.forward_inputs[NOISE], (torch.tanh(mean) * 0.5).view(6, 4, 4))
    u = torch.full((1, 16), 30.0)  # far past the squash: still inside the bound
    assert policy.noise_policy._scale(u).max() <= 0.5  # type: ignore[attr-defined]


def test_before_any_update_greedy_dsrl_is_the_frozen_ode_from_zero_noise_whatever_the_seed():
    obs = observations(5)
    for seed in (0, 1):
        torch.manual_seed(seed)
        fresh = DSRLPolicy(dsrl_config(), spec())
        greedy = fresh.act(obs, deterministic=True)
        assert torch.equal(greedy.forward_inputs[NOISE], torch.zeros(5, 4, 4))
        steering = fresh.frozen.steer(obs)  # type: ignore[attr-defined]
        assert torch.equal(greedy.actions, steering.decode(torch.zeros(5, 4, 4)))
        torch.manual_seed(3)
        assert fresh.act(obs).forward_inputs[NOISE].abs().max() > 0.0  # sampled noise still spreads


def test_the_frozen_ode_from_a_given_noise_is_the_flow_policys_own_greedy_loop(policy):
    obs, frozen = observations(3), policy.frozen
    torch.manual_seed(7)
    own = frozen.act(obs, deterministic=True)  # draws its noise [3, C, A] from torch's RNG
    torch.manual_seed(7)
    noise = torch.randn(3, 4, 4)
    steering = frozen.steer(obs)  # type: ignore[attr-defined]
    assert torch.equal(steering.decode(noise), own.actions)
    torch.manual_seed(2)
    out = policy.act(obs)
    assert torch.equal(out.actions, steering.decode(out.forward_inputs[NOISE]))  # the chunk of the noise it chose
    assert torch.equal(out.forward_inputs[FEATURES], steering.features)
    assert steering.features.shape == (3, frozen.flow_feature_size())  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:policy.type=pi0.*no normalization statistics")
def test_pi0_steers_the_executed_noise_and_the_rest_is_zero(monkeypatch):
    torch.manual_seed(0)
    frozen = PI0Policy(PI0PolicyConfig(action_chunk=3, flow_steps=3), PI0_SPEC)
    assert frozen.flow_noise_shape() == (3, 4) and frozen.chunk_size > 3 and frozen.max_action_dim > 4
    obs = pi0_observations(2)
    noise = torch.randn(2, 3, 4)
    full = torch.zeros(2, frozen.chunk_size, frozen.max_action_dim)
    full[:, :3, :4] = noise
    monkeypatch.setattr(torch, "randn", lambda *args, **kwargs: full.clone())  # act's own noise: the padded one
    own = frozen.act(obs, deterministic=True)
    monkeypatch.undo()
    steering = frozen.steer(obs)
    assert torch.allclose(steering.decode(noise), own.actions, atol=1e-6)
    assert steering.features.shape == (2, frozen.flow_feature_size())


def test_replay_keeps_the_features_act_computed_and_the_noise_as_the_action(policy, monkeypatch):
    obs = observations(2)
    out = policy.act(obs)
    calls = []
    monkeypatch.setattr(policy.frozen, "steer", lambda o: calls.append(o) or pytest.fail("recomputed"))
    assert policy.replay_record(obs, out) == {FEATURES: out.forward_inputs[FEATURES]}
    trajectory = SimpleNamespace(forward_inputs={k: v[None] for k, v in out.forward_inputs.items()},
                                 actions=out.actions[None])  # [T=1, N, ...]
    assert torch.equal(DSRLLearner.replay_actions(None, trajectory)[0], out.forward_inputs[NOISE])  # the learner's
    assert torch.equal(policy.forward_inputs({FEATURES: out.forward_inputs[FEATURES]})[FEATURES],
                       out.forward_inputs[FEATURES])  # an obs as replay holds it
    assert torch.equal(policy.value(obs), torch.zeros(2)) and not calls


def test_states_features_are_the_env_states():
    cfg = dsrl_config("env.obs_mode=state+rgb", "algorithm.dsrl_features=states")
    policy = DSRLPolicy(cfg, spec())
    obs = observations(2)
    out = policy.act(obs)
    assert torch.equal(out.forward_inputs[FEATURES], torch.as_tensor(obs["states"]))
    assert policy.replay_record(obs)[FEATURES].shape == (2, 16)


def transitions(policy: DSRLPolicy, T: int = 2, N: int = 3, seed: int = 0) -> Trajectory:
    """Chunk transitions as a rollout worker records them for a DSRL policy (features, noise)."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(T + 1, N, policy.frozen.flow_feature_size(), generator=g)  # type: ignore[attr-defined]
    noise = (torch.rand(T, N, 4, 4, generator=g) * 2 - 1) * 0.5
    return Trajectory(
        forward_inputs={FEATURES: features[:-1], NOISE: noise}, actions=torch.rand(T, N, 4, 4, generator=g),
        logprobs=torch.zeros(T, N), values=torch.zeros(T, N), rewards=torch.randn(T, N, 4, generator=g),
        executed=torch.ones(T, N, 4, dtype=torch.bool), dones=torch.zeros(T, N, dtype=torch.bool),
        terminated=torch.zeros(T, N, dtype=torch.bool), final_values=torch.zeros(T, N), next_values=torch.zeros(N),
        version=0, observations={FEATURES: features[:-1]}, next_observations={FEATURES: features[1:]})


def test_updates_move_only_the_noise_policy_and_the_critics_and_sync_sends_only_it():
    cfg = load_config(RECIPE, TINY)
    worker = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), spec(), cfg.algorithm, cfg.actor,
                                  cfg.runner.iterations, seed=0)
    policy = worker.policy
    assert isinstance(policy, DSRLPolicy)
    frozen = {k: v.clone() for k, v in policy.frozen.state_dict().items()}
    assert not any(p.requires_grad for p in policy.frozen.parameters())
    actor = {k: v.clone() for k, v in policy.state_dict().items()}
    critics = {k: v.clone() for k, v in worker.learner.critics.state_dict().items()}
    assert {id(p) for p in worker.learner.policy_params} == {id(p) for p in policy.noise_policy.parameters()}
    assert worker.learner.target_entropy == -16.0  # -Cn * An of the noise

    metrics = worker.update([transitions(policy)], 1)
    assert metrics["offpolicy/updates"] == 6 and metrics["replay/size"] == 6
    assert worker.training.replay.storage["actions"].shape[1:] == (4, 4)  # the noise is the action
    assert set(worker.training.replay.storage) >= {f"obs/{FEATURES}", f"next_obs/{FEATURES}"}
    assert any(not torch.equal(v, policy.state_dict()[k]) for k, v in actor.items())
    assert all(not torch.equal(v, worker.learner.critics.state_dict()[k]) for k, v in critics.items())
    assert all(torch.equal(v, policy.frozen.state_dict()[k]) for k, v in frozen.items())

    version, weights = worker.weights()
    assert version == 6 and weights is not None
    assert set(weights) == {f"noise_policy.{k}" for k in policy.noise_policy.state_dict()}  # no frozen tensor travels
    assert sum(v.numel() for v in weights.values()) < sum(p.numel() for p in policy.frozen.parameters()) / 100
    assert set(worker.state()["policy"]) == set(weights)  # checkpoints hold the noise policy alone (and the learner)


@pytest.mark.parametrize("override, message", [
    ("policy.action_head=tokens", r"policy\.type: algorithm\.name=dsrl steers the initial noise of a flow-matching "
                                  r"policy.*policy\.action_head=flow"),
    ("policy.action_head=gaussian", r"policy\.type: algorithm\.name=dsrl"),
    ("algorithm.noise_scale=0", r"algorithm\.noise_scale: .* must be > 0"),
    ("algorithm.noise_scale=-1", r"algorithm\.noise_scale"),
    ("algorithm.dsrl_features=states", r"algorithm\.dsrl_features: 'states' needs states.*env\.obs_mode='rgb'"),
    ("algorithm.demos=some/folder", r"algorithm\.demos: .*DSRL's actions are the frozen policy's initial noise"),
    ("algorithm.noise_policy_hidden_sizes=[]", r"algorithm\.noise_policy_hidden_sizes"),
    ("algorithm.utd_ratio=0", r"algorithm\.utd_ratio"),  # SAC's own checks hold for DSRL
])
def test_bad_dsrl_config_names_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(RECIPE, [override])


def test_dsrl_on_an_mlp_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"policy\.type=mlp as configured starts from none"):
        load_config(None, ["algorithm.name=dsrl", "env.id=Reach-v0", "env.obs_mode=state", "policy.type=mlp"])


def test_a_state_dict_saved_when_the_noise_policy_was_called_actor_loads(policy):
    """Checkpoints written before the rename hold the noise policy's tensors as ``actor.*``: DSRL's
    ``checkpoint_moves`` bring them to ``noise_policy.*`` (``embodied.checkpoint.migrate``)."""
    from embodied.algorithms.dsrl_config import DSRLConfig
    from embodied.checkpoint.migrate import migrate_actor

    old = {f"actor.{k[len('noise_policy.'):]}": v + 1 for k, v in policy.state_dict().items()}
    entry = migrate_actor({"policy": dict(old)}, DSRLConfig.checkpoint_moves)
    twin = DSRLPolicy(dsrl_config(), spec())
    twin.load_state_dict(entry["policy"])
    assert all(torch.equal(v, old[f"actor.{k[len('noise_policy.'):]}"]) for k, v in twin.state_dict().items())

"""The flow-matching action head: the expert, Flow-SDE and Flow-Noise log-probs, exact replay,
the flow-matching SFT loss, three backbone families, checkpoints and the errors of bad settings."""

from __future__ import annotations

import math

import pytest
import torch

from embodied.config import ConfigError, load_config
from embodied.policies.flow_logprob import CHAIN, STEP, FlowSDE, step_distribution
from embodied.policies.vla.configuration import VLAConfig
from embodied.policies.vla.flow import FlowExpert, FlowHead, ExpertShape
from embodied.policies.vla.modeling import VLAPolicy
from embodied.policies.vla.tiny import TINY_BACKBONES
from tests.policies.test_vla import observations, spec

SMALL = {"flow_width": 64, "flow_depth": 2, "flow_heads": 2}



def _step(head, x, t, cache, noisy):
    """Mean and std of the next sample, as the head's sampling computes them."""
    v, features = head.expert(x, t, cache)
    return step_distribution(head.logprob, x, v, features, t, 1.0 / head.steps, noisy, None)

def make(backbone: str = "smolvlm-tiny", **fields) -> VLAPolicy:
    torch.manual_seed(0)
    cfg = VLAConfig(model_path=f"tiny:{backbone}", action_head="flow", **{"action_chunk": 2, **SMALL, **fields})
    return VLAPolicy(cfg, spec())


def ratio(policy: VLAPolicy, out, rows: slice = slice(None)) -> torch.Tensor:
    """exp(new - old) of the first minibatch, as PPO's first update computes it."""
    inputs = {k: v[rows] for k, v in out.forward_inputs.items()}
    with torch.no_grad():
        logprobs, _, _ = policy.evaluate(inputs, out.actions[rows])
    return (logprobs - out.logprobs[rows]).exp()


@pytest.mark.parametrize("backbone", sorted(TINY_BACKBONES))
@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_evaluate_replays_act_so_the_first_ppo_ratio_is_one(backbone, mode):
    policy = make(backbone, flow_logprob=mode, use_states=True, flow_steps=4)
    with torch.no_grad():
        out = policy.act(observations(6))
    assert out.actions.shape == (6, 2, 4) and out.logprobs.shape == (6, 2)  # per action
    assert policy.logprob_granularity == "action"
    assert out.forward_inputs[CHAIN].shape == (6, 5, 2, 4)  # x_1 (the noise) ... x_0, K = 4
    r = ratio(policy, out, slice(0, 3))
    assert torch.allclose(r, torch.ones_like(r), atol=1e-5), r
    with torch.no_grad():
        values = policy.evaluate(out.forward_inputs, out.actions)[2]
    assert torch.allclose(values, out.values, atol=1e-6)
    assert torch.allclose(policy.value(observations(6)), out.values, atol=1e-6)


def test_sde_makes_exactly_the_recorded_step_stochastic():
    policy = make(flow_logprob="sde", flow_steps=5)
    obs = observations(8)
    with torch.no_grad():
        out = policy.act(obs)
        chain, step = out.forward_inputs[CHAIN], out.forward_inputs[STEP]
        assert step.shape == (8,) and 0 <= int(step.min()) and int(step.max()) < 5
        assert len(set(step.tolist())) > 1  # drawn per chunk, not once per batch
        backbone = policy._backbone(out.forward_inputs)
        cache = policy.head.expert.encode_prefix(backbone.prefix())
        times = torch.linspace(1, 0, 6)
        for k in range(5):
            ode, _ = _step(policy.head, chain[:, k], times[k].expand(8), cache, None)
            off_path = (chain[:, k + 1] - ode).abs().amax((1, 2)) > 1e-5
            assert torch.equal(off_path, step == k)  # every other step follows the ODE exactly


def test_sde_step_has_the_closed_form_mean_and_std():
    a, delta = 0.7, 0.25
    sde = FlowSDE(a)
    features = torch.zeros(2, 3, 8)
    t = torch.tensor([1.0, 0.5])
    std, w1 = sde.step_std(t, delta, features, 8)
    sigma = torch.tensor([a * math.sqrt(1 / delta), a * math.sqrt(0.5 / 0.5)])  # at t = 1 the denominator is delta
    assert torch.allclose(std[:, 0, 0], sigma * math.sqrt(delta))
    assert torch.allclose(w1[:, 0, 0], t - delta - sigma ** 2 * delta / (2 * t))


def test_noise_mode_learns_a_bounded_std_at_every_step_with_an_entropy():
    policy = make(flow_logprob="noise", flow_steps=3, flow_noise_std_min=0.05, flow_noise_std_max=0.2)
    with torch.no_grad():
        out = policy.act(observations(4))
        backbone = policy._backbone(out.forward_inputs)
        cache = policy.head.expert.encode_prefix(backbone.prefix())
        chain = out.forward_inputs[CHAIN]
        for k in range(3):
            t = torch.full((4,), 1 - k / 3)
            mean, std = _step(policy.head, chain[:, k], t, cache, torch.ones(4, dtype=torch.bool))
            assert ((std >= 0.05) & (std <= 0.2)).all()
            assert (chain[:, k + 1] - mean).abs().max() > 1e-4  # noise at every step
    assert STEP not in out.forward_inputs
    logprobs, entropy, _ = policy.evaluate(out.forward_inputs, out.actions)
    assert entropy.shape == (4, 2) and torch.isfinite(entropy).all()
    (logprobs.sum() + entropy.sum()).backward()
    assert policy.head.noise_std.weight.grad.abs().sum() > 0  # the std head learns from the log-prob


@pytest.mark.parametrize("mode,lora", [("sde", 0), ("noise", 0), ("sde", 4)])
def test_gradients_of_the_logprob_reach_the_expert_and_the_lora_adapters(mode, lora):
    policy = make(flow_logprob=mode, lora_rank=lora)
    with torch.no_grad():
        out = policy.act(observations(4))
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.sum() + values.sum()).backward()
    grads = {n: p.grad for n, p in policy.named_parameters() if p.requires_grad}
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if n.startswith("head.expert."))
    backbone = [g for n, g in grads.items() if n.startswith("backbone.")]
    assert backbone and any(g is not None and g.abs().sum() > 0 for g in backbone)
    if lora:
        assert all("lora_" in n for n in grads if n.startswith("backbone."))


@pytest.mark.parametrize("mode", ["sde", "noise"])
def test_a_frozen_backbone_leaves_the_policy_gradient_and_the_value_loss_to_the_heads(mode):
    policy = make(flow_logprob=mode, freeze_backbone=True)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and not any(n.startswith("backbone.") for n in trainable)
    assert any(n.startswith("head.expert.") for n in trainable) and any(n.startswith("value_head.") for n in trainable)
    with torch.no_grad():
        out = policy.act(observations(4))
    r = ratio(policy, out)
    assert torch.allclose(r, torch.ones_like(r), atol=1e-5)
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.sum() + values.sum()).backward()
    assert all(p.grad is None for p in policy.backbone.parameters())
    assert policy.head.expert.velocity.weight.grad.abs().sum() > 0


def test_the_prefix_is_computed_once_per_act_and_reused_by_every_euler_step(monkeypatch):
    policy = make(flow_steps=6)
    calls = {"backbone": 0, "encode": 0}
    forward = policy._inner.forward

    def counted(*args, **kwargs):
        calls["backbone"] += 1
        return forward(*args, **kwargs)

    encode = policy.head.expert.encode_prefix

    def counted_encode(prefix):
        calls["encode"] += 1
        return encode(prefix)

    monkeypatch.setattr(policy._inner, "forward", counted)
    monkeypatch.setattr(policy.head.expert, "encode_prefix", counted_encode)
    with torch.no_grad():
        policy.act(observations(3))
    assert calls == {"backbone": 1, "encode": 1}


def test_greedy_integrates_the_ode_from_the_seeded_noise():
    policy = make(flow_steps=4)
    obs = observations(3)
    with torch.no_grad():
        torch.manual_seed(5)
        first = policy.act(obs, deterministic=True)
        torch.manual_seed(5)
        again = policy.act(obs, deterministic=True)
        torch.manual_seed(6)
        other = policy.act(obs, deterministic=True)
    assert torch.equal(first.actions, again.actions)
    assert not torch.equal(first.actions, other.actions)  # the starting noise comes from torch's RNG
    chain = first.forward_inputs[CHAIN]
    backbone = policy._backbone(first.forward_inputs)
    with torch.no_grad():
        cache = policy.head.expert.encode_prefix(backbone.prefix())
        x = chain[:, 0]
        for k in range(4):
            v, _ = policy.head.expert(x, torch.full((3,), 1 - k / 4), cache)
            x = x - 0.25 * v  # Euler from t = 1 to 0
    assert torch.allclose(x, chain[:, -1], atol=1e-5)


def test_flow_matching_sft_loss_learns_and_ignores_actions_past_the_episode_end():
    policy = make(flow_steps=4)
    obs = observations(8)
    inputs = policy.forward_inputs(obs)
    actions = torch.rand(8, 2, 4) * 1.6 - 0.8
    executed = torch.ones(8, 2, dtype=torch.bool)
    executed[:4, 1] = False
    executed[6] = False  # a chunk wholly past the end (its actions are still the expert's input, as in π0)
    torch.manual_seed(1)
    loss = policy.supervised_loss(inputs, actions, executed)
    changed = actions.clone()
    changed[6] = 0.9  # past the end: must not matter
    torch.manual_seed(1)
    assert torch.equal(loss, policy.supervised_loss(inputs, changed, executed))
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    losses = []
    for _ in range(60):
        loss = policy.supervised_loss(inputs, actions, executed)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:5]) / 5
    with pytest.raises(ValueError, match="only chunks sampled by act can be scored"):
        policy.evaluate(inputs, actions)


def test_beta_time_of_the_flow_matching_loss_leans_towards_noise(monkeypatch):
    policy = make()
    seen = []
    forward = policy.head.expert.forward

    def record(x, t, cache):
        seen.append(t)
        return forward(x, t, cache)

    monkeypatch.setattr(policy.head.expert, "forward", record)
    inputs = policy.forward_inputs(observations(256))
    with torch.no_grad():
        policy.supervised_loss(inputs, torch.zeros(256, 2, 4), torch.ones(256, 2, dtype=torch.bool))
    t = seen[0]
    assert t.min() >= 0.001 and t.max() <= 1.0
    assert 0.55 < float(t.mean()) < 0.65  # Beta(1.5, 1): mean 0.6 (π0), not uniform's 0.5


def test_save_and_load_give_the_same_greedy_chunks_and_sde_checkpoints_start_flow_noise(tmp_path):
    policy = make(flow_logprob="sde")
    for p in policy.head.parameters():
        p.data.add_(0.01 * torch.randn_like(p))
    policy.save_pretrained(tmp_path / "ckpt")
    loaded = make(flow_logprob="sde")
    loaded.load_pretrained(tmp_path / "ckpt")
    obs = observations(3)
    with torch.no_grad():
        torch.manual_seed(2)
        a = policy.act(obs, deterministic=True).actions
        torch.manual_seed(2)
        b = loaded.act(obs, deterministic=True).actions
    assert torch.equal(a, b)
    noisy = make(flow_logprob="noise")
    noisy.load_pretrained(tmp_path / "ckpt")  # the std head starts fresh; the expert is the checkpoint's
    assert torch.equal(noisy.head.expert.velocity.weight, policy.head.expert.velocity.weight)


def test_expert_size_is_configurable_and_printed():
    small, large = make(flow_width=32, flow_depth=1), make(flow_width=96, flow_depth=3, flow_heads=4)
    count = lambda p: sum(x.numel() for x in p.head.parameters())  # noqa: E731
    assert count(small) < count(large)
    assert len(large.head.expert.layers) == 3 and large.head.expert.velocity.in_features == 96
    line = large.describe()
    assert "flow expert: width 96, depth 3" in line and f"action head {count(large) / 1e6:.2f}M" in line
    # Expert layers attend to backbone layers evenly up to the last (hidden_states[0] are the embeddings).
    assert large.head.expert.prefix_layers(4) == [1, 3, 4] and small.head.expert.prefix_layers(4) == [4]


def test_a_real_size_paligemma_and_a_300m_expert_construct():
    from transformers import AutoModelForImageTextToText

    from embodied.policies.vla.tiny import paligemma_3b_config

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(paligemma_3b_config())
        expert = FlowExpert(50, 32, 2048, ExpertShape(width=1024, depth=18, heads=8))
    assert type(model).__name__ == "PaliGemmaForConditionalGeneration"
    assert 2.8e9 < sum(p.numel() for p in model.parameters()) < 3.0e9  # PaliGemma-3B
    assert 2.5e8 < sum(p.numel() for p in expert.parameters()) < 4e8  # π0's expert is ~300M


BAD = [
    ("policy.flow_steps=0", "policy.flow_steps: must be >= 1"),
    ("policy.flow_logprob=reinforce", "policy.flow_logprob"),
    ("policy.flow_noise_level=0", "policy.flow_noise_level: must be > 0"),
    ("policy.flow_noise_std_min=0.3", "flow_noise_std_min / flow_noise_std_max: need 0 < min <= max"),
    ("policy.action_bins=128", "policy.action_bins: only the token heads have bins"),
    ("policy.flow_heads=3", "flow_heads dividing flow_width"),
    ("policy.freeze_backbone=true policy.lora_rank=4", "policy.freeze_backbone: .* LoRA adapters .* would never train"),
    ("policy.freeze_backbone=true policy.action_head=tokens", "policy.freeze_backbone: action_head=tokens reads"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_flow_settings_are_named_before_any_worker(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/pick_color_tinyvla_flow_ppo.yaml", override.split())


def test_a_flow_head_is_one_head_among_the_others():
    head = make().head
    assert isinstance(head, FlowHead) and head.continuous and head.granularity == "action"

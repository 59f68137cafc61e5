"""The Gaussian CNN policy: shapes, uint8 inputs, determinism, replay by ``evaluate``, gradients, config wiring."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from embodied.algorithms import ppo_loss
from embodied.config import ConfigError, load_config
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policies.cnn.modeling import CNNPolicy, SpatialSoftmax
from embodied.policy.base import Policy, PolicySpec, build_policy

B, S, C, A = 5, 7, 4, 3
IMAGE = (32, 32, 3)
SMALL = dict(channels=[8, 16], kernel_sizes=[8, 4], strides=[4, 2], image_features=32, state_features=16,
             hidden_sizes=[32])
RGB = PolicySpec(state_dim=0, image_shape=IMAGE, action_dim=A, action_low=(-1.0,) * A, action_high=(1.0,) * A)
SPECS = {
    "rgb": RGB,
    "rgb+wrist": dataclasses.replace(RGB, wrist_image_shape=IMAGE),
    "state+rgb": dataclasses.replace(RGB, state_dim=S),
    "state+rgb+wrist": dataclasses.replace(RGB, state_dim=S, wrist_image_shape=IMAGE),
}
WRIST = SPECS["rgb+wrist"]


def make(spec: PolicySpec = WRIST, **kwargs) -> CNNPolicy:
    torch.manual_seed(0)
    return CNNPolicy(CNNConfig(action_chunk=C, **{**SMALL, **kwargs}), spec)


def obs(batch: int = B, seed: int = 0, image: tuple[int, ...] = IMAGE) -> dict:
    """Every key an env can give; a policy reads only the ones its spec names."""
    rng = np.random.default_rng(seed)
    return {
        MAIN_IMAGES: rng.integers(0, 256, size=(batch, *image), dtype=np.uint8),
        WRIST_IMAGES: rng.integers(0, 256, size=(batch, *image), dtype=np.uint8),
        STATES: rng.normal(size=(batch, S)).astype(np.float32),
        "task_descriptions": ["t"] * batch,
    }


def expected_keys(spec: PolicySpec) -> set[str]:
    wrist = {WRIST_IMAGES} if spec.wrist_image_shape else set()
    return {MAIN_IMAGES} | wrist | ({STATES} if spec.state_dim else set())


@pytest.mark.parametrize("mode", SPECS)
def test_act_shapes_and_uint8_forward_inputs(mode):
    spec = SPECS[mode]
    out = make(spec).act(obs())
    assert out.actions.shape == (B, C, A) and out.actions.dtype == torch.float32
    assert out.logprobs.shape == (B,) and out.values.shape == (B,)
    assert out.logprobs.dtype == out.values.dtype == torch.float32
    assert set(out.forward_inputs) == expected_keys(spec)
    for key in (MAIN_IMAGES, WRIST_IMAGES):
        if key in out.forward_inputs:
            assert out.forward_inputs[key].dtype == torch.uint8 and out.forward_inputs[key].shape == (B, *IMAGE)
    if spec.state_dim:
        assert out.forward_inputs[STATES].dtype == torch.float32 and out.forward_inputs[STATES].shape == (B, S)
    assert all(t.device.type == "cpu" for t in (out.actions, out.logprobs, out.values))
    assert CNNPolicy.logprob_granularity == "chunk"


def test_forward_inputs_are_a_copy_of_the_observation():
    """Env buffers may be overwritten after the step; what act saw must not change."""
    o = obs()
    out = make().act(o)
    before = out.forward_inputs[MAIN_IMAGES].clone()
    o[MAIN_IMAGES][:] = 0
    assert torch.equal(out.forward_inputs[MAIN_IMAGES], before)


def test_act_accepts_a_single_env_and_float64_states():
    policy = make(SPECS["state+rgb"])
    o = obs(1)
    o[STATES] = o[STATES].astype(np.float64)
    out = policy.act(o)
    assert out.actions.shape == (1, C, A) and out.forward_inputs[STATES].dtype == torch.float32


def test_deterministic_act_returns_the_mean_and_is_repeatable():
    policy = make()
    o = obs()
    first, second = policy.act(o, deterministic=True), policy.act(o, deterministic=True)
    torch.testing.assert_close(first.actions, second.actions, rtol=0, atol=0)
    mean = policy.actor_mean(policy._features(first.forward_inputs)).view(B, C, A)
    torch.testing.assert_close(first.actions, mean, rtol=0, atol=0)
    sampled = policy.act(o)
    assert not torch.equal(sampled.actions, first.actions)
    assert (first.logprobs > sampled.logprobs).all()  # the mean is the mode


@pytest.mark.parametrize("mode", SPECS)
def test_evaluate_replays_act(mode):
    policy = make(SPECS[mode])
    for deterministic in (False, True):
        out = policy.act(obs(), deterministic=deterministic)
        logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
        torch.testing.assert_close(logprobs, out.logprobs, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, out.values, rtol=0, atol=1e-6)
        assert entropy.shape == (B,)


def test_evaluate_on_a_flat_batch_of_chunks():
    """The actor flattens [T, N] into one batch; evaluate must work on any batch size."""
    policy = make(SPECS["state+rgb+wrist"])
    outs = [policy.act(obs(seed=s)) for s in range(3)]
    inputs = {k: torch.cat([o.forward_inputs[k] for o in outs]) for k in outs[0].forward_inputs}
    logprobs, _, values = policy.evaluate(inputs, torch.cat([o.actions for o in outs]))
    torch.testing.assert_close(logprobs, torch.cat([o.logprobs for o in outs]), rtol=0, atol=1e-5)
    torch.testing.assert_close(values, torch.cat([o.values for o in outs]), rtol=0, atol=1e-5)


def test_entropy_matches_the_std():
    policy = make(init_log_std=0.0)
    out = policy.act(obs())
    _, entropy, _ = policy.evaluate(out.forward_inputs, out.actions)
    expected = C * A * 0.5 * np.log(2 * np.pi * np.e)  # unit Gaussian per dimension
    torch.testing.assert_close(entropy, torch.full((B,), expected, dtype=torch.float32))


def test_value_matches_act_values():
    policy = make(SPECS["state+rgb+wrist"])
    o = obs()
    torch.testing.assert_close(policy.value(o), policy.act(o).values, rtol=0, atol=1e-6)
    assert policy.value(o).shape == (B,)


def test_every_input_reaches_the_output():
    """Changing the main image, the wrist image or the states changes the action mean and the value."""
    policy = make(SPECS["state+rgb+wrist"])
    o = obs()
    base = policy.act(o, deterministic=True)
    for key, seed in ((MAIN_IMAGES, 1), (WRIST_IMAGES, 2), (STATES, 3)):
        changed = dict(o, **{key: obs(seed=seed)[key]})
        out = policy.act(changed, deterministic=True)
        assert not torch.allclose(out.actions, base.actions), key
        assert not torch.allclose(out.values, base.values), key


def test_gradients_flow_to_encoder_heads_and_log_std():
    policy = make(SPECS["state+rgb+wrist"])
    with torch.no_grad():
        out = policy.act(obs())
    logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
    (logprobs.mean() + entropy.mean() + values.pow(2).mean()).backward()
    for name, param in policy.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name


def test_ppo_steps_change_every_parameter_and_raise_the_advantaged_logprobs():
    policy = make(SPECS["state+rgb+wrist"])
    o = obs(16)
    with torch.no_grad():
        out = policy.act(o)
    initial = {k: v.clone() for k, v in policy.state_dict().items()}
    advantages = torch.linspace(-1.0, 1.0, 16)
    returns = torch.linspace(0.0, 2.0, 16)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for _ in range(3):
        logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
        loss = ppo_loss(logprobs, out.logprobs, advantages, values, out.values, returns, entropy, clip_coef=0.2,
                        vf_coef=0.5, ent_coef=0.0, clip_vloss=True, mask=torch.ones(16, dtype=torch.bool)).loss
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    changed = {k for k, v in policy.state_dict().items() if not torch.equal(v, initial[k])}
    assert changed == set(initial), set(initial) - changed
    with torch.no_grad():
        logprobs, _, _ = policy.evaluate(out.forward_inputs, out.actions)
    delta = logprobs - out.logprobs
    assert delta[advantages > 0].mean() > delta[advantages < 0].mean()


def test_state_only_spec_raises_a_clear_error():
    spec = PolicySpec(state_dim=S, image_shape=None, action_dim=A, action_low=(-1.0,) * A, action_high=(1.0,) * A)
    with pytest.raises(ValueError, match=r"policy.type=cnn needs image observations.*env.obs_mode"):
        CNNPolicy(CNNConfig(), spec)


def test_wrist_images_can_be_left_out():
    policy = make(WRIST, use_wrist_images=False)
    out = policy.act(obs())
    assert set(out.forward_inputs) == {MAIN_IMAGES}
    assert policy.actor_mean[0].in_features == SMALL["image_features"]
    with_wrist = make(WRIST)
    assert with_wrist.actor_mean[0].in_features == 2 * SMALL["image_features"]  # one encoder, two cameras
    encoder_size = [sum(p.numel() for p in m.encoder.parameters()) for m in (with_wrist, policy)]
    assert encoder_size[0] == encoder_size[1]


def test_bad_images_raise_clear_errors():
    policy = make()
    o = obs()
    o[MAIN_IMAGES] = o[MAIN_IMAGES].astype(np.float32) / 255
    with pytest.raises(ValueError, match="main_images uint8"):
        policy.act(o)
    o = obs()
    del o[WRIST_IMAGES]
    with pytest.raises(KeyError, match="wrist_images"):
        policy.act(o)
    with pytest.raises(ValueError, match="same shape"):
        make(dataclasses.replace(RGB, wrist_image_shape=(16, 16, 3)))
    with pytest.raises(ValueError, match="do not fit"):
        make(dataclasses.replace(RGB, image_shape=(6, 6, 3)))


def test_config_builds_through_build_policy():
    cfg = load_config(None, ["policy.type=cnn", "policy.channels=[8, 16]", "policy.kernel_sizes=[8, 4]",
                             "policy.strides=[4, 2]", "policy.action_chunk=2", "env.obs_mode=rgb"])
    assert isinstance(cfg.policy, CNNConfig) and cfg.policy.channels == [8, 16]
    policy = build_policy(cfg.policy, WRIST)
    assert isinstance(policy, CNNPolicy) and isinstance(policy, Policy)
    convs = [m for m in policy.encoder.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(m.out_channels, m.kernel_size, m.stride) for m in convs] == [(8, (8, 8), (4, 4)), (16, (4, 4), (2, 2))]
    assert policy.act(obs()).actions.shape == (B, 2, A)


def test_config_rejects_conv_lists_of_different_lengths():
    with pytest.raises(ConfigError, match=r"policy.channels, policy.kernel_sizes, policy.strides"):
        load_config(None, ["policy.type=cnn", "policy.channels=[8, 16]"])
    with pytest.raises(ConfigError, match=r"policy.image_features"):
        load_config(None, ["policy.type=cnn", "policy.image_features=0"])


def test_state_dict_round_trip_gives_the_same_actions():
    """The actor's copy and a rollout worker's copy are built from the same spec and load each other."""
    a = make(SPECS["state+rgb+wrist"])
    b = CNNPolicy(CNNConfig(action_chunk=C, **SMALL), SPECS["state+rgb+wrist"])
    b.load_state_dict(a.state_dict())
    o = obs()
    torch.testing.assert_close(a.act(o, deterministic=True).actions, b.act(o, deterministic=True).actions)


@pytest.mark.parametrize("obs_mode", ["rgb", "state+rgb"])
def test_default_config_on_push_images(obs_mode):
    """The recipe's size: 64x64 main and wrist images of the real Push env, default layers."""
    from embodied.env_runtime.factory import policy_spec
    from embodied.envs.push import PushEnv

    env = PushEnv(obs_mode=obs_mode)
    try:
        spec = policy_spec(env.observation_space, env.action_space)
        first, _ = env.reset(seed=0)
    finally:
        env.close()
    assert spec.image_shape == (64, 64, 3) and spec.wrist_image_shape == (64, 64, 3)
    torch.manual_seed(0)
    policy = CNNPolicy(CNNConfig(action_chunk=4), spec)
    batch = {k: [v] * 2 if isinstance(v, str) else np.stack([v] * 2) for k, v in first.items()}
    out = policy.act(batch)
    assert out.actions.shape == (2, 4, 4)
    assert set(out.forward_inputs) == {MAIN_IMAGES, WRIST_IMAGES} | ({STATES} if "state" in obs_mode else set())
    logprobs, _, values = policy.evaluate(out.forward_inputs, out.actions)
    torch.testing.assert_close(logprobs, out.logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(values, out.values, rtol=0, atol=1e-6)
    assert sum(p.numel() for p in policy.parameters()) < 1_000_000  # small enough for CPU PPO


def test_spatial_softmax_gives_each_channel_the_position_of_its_peak():
    pool = SpatialSoftmax(height=5, width=9)
    maps = torch.zeros(2, 3, 5, 9)
    peaks = [[(0, 0), (4, 8), (2, 4)], [(1, 6), (3, 2), (4, 0)]]  # (row, col) of each channel's peak
    for b, channels in enumerate(peaks):
        for k, (row, col) in enumerate(channels):
            maps[b, k, row, col] = 50.0  # softmax ~ one-hot at temperature 1
    expected = torch.tensor([[[-1 + col / 4, -1 + row / 2] for row, col in channels] for channels in peaks])
    torch.testing.assert_close(pool(maps), expected.flatten(1), atol=1e-6, rtol=0)
    flat = torch.zeros(1, 1, 5, 9)  # no peak: the centre of the image
    torch.testing.assert_close(pool(flat), torch.zeros(1, 2), atol=1e-6, rtol=0)


def test_spatial_softmax_pooling_moves_with_the_object_and_trains_its_temperature():
    policy = make(RGB, strides=[2, 1], kernel_sizes=[5, 3], image_pooling="spatial_softmax")
    keypoints = policy.encoder.convs[:-1]  # convs and pooling, without the flatten: [B, 2 * 16] coordinates
    assert isinstance(keypoints[-1], SpatialSoftmax) and keypoints(torch.zeros(1, 3, 32, 32)).shape == (1, 32)
    images = np.zeros((2, *IMAGE), dtype=np.uint8)
    images[0, 4:8, 4:8] = images[1, 24:28, 24:28] = 255  # one white square, top left and bottom right
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    coords = keypoints(x).view(2, 16, 2)
    moved = (coords[1] - coords[0]).abs().sum(-1) > 0.1
    assert moved.any(), "no keypoint followed the square"
    assert torch.all(coords[1][moved] > coords[0][moved])  # down and to the right in both x and y
    dist, values = policy._heads(policy.forward_inputs(obs(3)))
    (dist.mean.sum() + values.sum()).backward()
    assert policy.encoder.convs[-2].log_temperature.grad is not None
    with pytest.raises(ConfigError, match=r"policy\.image_pooling"):
        load_config(None, ["policy.type=cnn", "env.obs_mode=rgb", "policy.image_pooling=average"])


def test_init_from_log_std_sets_the_loaded_spread_and_nothing_else():
    trained = make()
    with torch.no_grad():
        trained.log_std.fill_(-3.0)
        trained.actor_mean[0].weight.add_(0.5)
    widened = make(init_from="ckpt", init_from_log_std=-1.0)
    widened.load_state_dict(trained.state_dict())
    widened.after_init_from()
    assert torch.equal(widened.log_std, torch.full_like(trained.log_std, -1.0))
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in widened.state_dict().items() if k != "log_std")
    kept = make(init_from="ckpt")
    kept.load_state_dict(trained.state_dict())
    kept.after_init_from()
    assert torch.equal(kept.log_std, trained.log_std)


def test_init_from_log_std_without_init_from_is_refused():
    with pytest.raises(ConfigError, match="policy.init_from_log_std: .*no policy.init_from is set"):
        load_config(None, ["policy.type=cnn", "env.obs_mode=rgb", "policy.init_from_log_std=-1.0"])

from __future__ import annotations

import math

import pytest
import torch

from embodied.algorithms.base import LearnerSpec
from embodied.policy.config import PolicySpec
from embodied.algorithms import LossOutput, normalize_advantages, ppo_loss

ANY_SPEC = LearnerSpec(PolicySpec(3, None, 2, (-1.0,) * 2, (1.0,) * 2), 1, 0, 1e-3, 1)  # what prepare() never reads

CLIP, VF, ENT = 0.2, 0.5, 0.01


def reference_ppo(new_lp, old_lp, adv, new_v, old_v, ret, ent, mask, clip_vloss, behav_lp=None):
    """Clipped PPO loss written entry by entry on plain Python floats (lists, any nesting); with
    ``behav_lp``, decoupled PPO: each term weighted by pi_old / pi_behav."""

    def leaves(x):
        # flatten one row's nested list into floats
        return [x] if not isinstance(x, list) else [y for z in x for y in leaves(z)]

    B = len(new_lp)
    pg_sum, kl_sum, clip_sum, ent_sum, count = 0.0, 0.0, 0.0, 0.0, 0.0
    v_sum, v_count = 0.0, 0.0
    for b in range(B):
        new_row, old_row, ent_row = leaves(new_lp[b]), leaves(old_lp[b]), leaves(ent[b])
        mask_row = leaves(mask[b]) if mask is not None else [1.0] * len(new_row)
        behav_row = leaves(behav_lp[b]) if behav_lp is not None else old_row
        for new, old, e, m, behav in zip(new_row, old_row, ent_row, mask_row, behav_row):
            if not m:
                continue
            ratio = math.exp(new - old)
            clipped = min(max(ratio, 1 - CLIP), 1 + CLIP)
            pg_sum += max(-adv[b] * ratio, -adv[b] * clipped) * math.exp(old - behav)
            kl_sum += (ratio - 1) - (new - old)
            clip_sum += 1.0 if abs(ratio - 1) > CLIP else 0.0
            ent_sum += e
            count += 1
        if any(mask_row):
            v_err = (new_v[b] - ret[b]) ** 2
            if clip_vloss:
                v_clip = old_v[b] + min(max(new_v[b] - old_v[b], -CLIP), CLIP)
                v_err = max(v_err, (v_clip - ret[b]) ** 2)
            v_sum += v_err
            v_count += 1
    pg, ent_mean, v_loss = pg_sum / count, ent_sum / count, 0.5 * v_sum / v_count
    return {
        "loss": pg - ENT * ent_mean + VF * v_loss,
        "policy_loss": pg,
        "value_loss": v_loss,
        "entropy": ent_mean,
        "approx_kl": kl_sum / count,
        "clip_frac": clip_sum / count,
    }


def random_batch(shape, seed=0, with_mask=False):
    g = torch.Generator().manual_seed(seed)
    B = shape[0]
    old_lp = torch.randn(shape, generator=g, dtype=torch.float64)
    # ratios spread on both sides of the clip range
    new_lp = old_lp + 0.4 * torch.randn(shape, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    old_v = torch.randn(B, generator=g, dtype=torch.float64)
    new_v = old_v + 0.5 * torch.randn(B, generator=g, dtype=torch.float64)
    ret = torch.randn(B, generator=g, dtype=torch.float64)
    ent = torch.rand(shape, generator=g, dtype=torch.float64)
    mask = None
    if with_mask:
        mask = torch.rand(shape, generator=g) < 0.7
        mask[0] = True  # at least one executed entry
        if len(shape) > 1:
            mask[1] = False  # a fully padded row drops out of the value loss too
    return new_lp, old_lp, adv, new_v, old_v, ret, ent, mask


def terms(out: LossOutput) -> dict[str, torch.Tensor]:
    """The loss and every logged term."""
    return {"loss": out.loss, **out.stats}


def call(batch, clip_vloss=True, **overrides):
    new_lp, old_lp, adv, new_v, old_v, ret, ent, mask = batch
    kwargs = dict(clip_coef=CLIP, vf_coef=VF, ent_coef=ENT, clip_vloss=clip_vloss, mask=mask)
    kwargs.update(overrides)
    return ppo_loss(new_lp, old_lp, adv, new_v, old_v, ret, ent, **kwargs)


SHAPES = [(16,), (8, 4), (6, 4, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=["chunk", "action", "token"])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_matches_reference(shape, with_mask, clip_vloss, seed):
    batch = random_batch(shape, seed=seed, with_mask=with_mask)
    out = call(batch, clip_vloss=clip_vloss)
    assert isinstance(out, LossOutput)

    as_lists = [x.tolist() if x is not None else None for x in batch]
    expected = reference_ppo(*as_lists, clip_vloss=clip_vloss)
    for name, value in expected.items():
        got = terms(out)[name]
        assert got.dim() == 0, name
        torch.testing.assert_close(got, torch.tensor(value, dtype=torch.float64), msg=name)
    # the random ratios really exercise the clipping
    assert 0.0 < out.stats["clip_frac"].item() < 1.0


@pytest.mark.parametrize("shape", SHAPES, ids=["chunk", "action", "token"])
def test_ratio_one(shape):
    new_lp, _, adv, new_v, old_v, ret, ent, _ = random_batch(shape, seed=1)
    out = call((new_lp, new_lp.clone(), adv, new_v, old_v, ret, ent, None))
    assert out.stats["clip_frac"].item() == 0.0
    assert out.stats["approx_kl"].item() == pytest.approx(0.0, abs=1e-12)
    # with a [B] advantage broadcast over equally many entries per row, the mean is mean(A)
    torch.testing.assert_close(out.stats["policy_loss"], -adv.mean())


@pytest.mark.parametrize("shape", SHAPES, ids=["chunk", "action", "token"])
def test_gradients_flow(shape):
    new_lp, old_lp, adv, new_v, old_v, ret, ent, mask = random_batch(shape, seed=2, with_mask=True)
    new_lp.requires_grad_(True)
    new_v.requires_grad_(True)
    ent.requires_grad_(True)
    out = call((new_lp, old_lp, adv, new_v, old_v, ret, ent, mask))
    out.loss.backward()
    assert new_lp.grad is not None and new_lp.grad.abs().sum() > 0
    assert new_v.grad is not None and new_v.grad.abs().sum() > 0
    assert ent.grad is not None and ent.grad.abs().sum() > 0
    # masked-out entries receive no gradient
    assert (new_lp.grad[~mask] == 0).all()
    assert (ent.grad[~mask] == 0).all()
    # diagnostics are detached
    assert not out.stats["approx_kl"].requires_grad and not out.stats["clip_frac"].requires_grad


@pytest.mark.parametrize("shape", [(8, 4), (6, 4, 3)], ids=["action", "token"])
def test_masked_entries_do_not_matter(shape):
    batch = random_batch(shape, seed=3, with_mask=True)
    new_lp, old_lp, adv, new_v, old_v, ret, ent, mask = batch
    base = call(batch)

    g = torch.Generator().manual_seed(99)
    noise = lambda: 10.0 * torch.randn(shape, generator=g, dtype=torch.float64)  # noqa: E731
    new_lp2 = torch.where(mask, new_lp, new_lp + noise())
    old_lp2 = torch.where(mask, old_lp, old_lp + noise())
    ent2 = torch.where(mask, ent, ent + noise())
    # row 1 is fully masked: its advantage, value and return must not matter either
    adv2, new_v2, old_v2, ret2 = adv.clone(), new_v.clone(), old_v.clone(), ret.clone()
    adv2[1] += 5.0
    new_v2[1] += 5.0
    old_v2[1] -= 5.0
    ret2[1] += 3.0
    changed = call((new_lp2, old_lp2, adv2, new_v2, old_v2, ret2, ent2, mask))
    for name, value in terms(base).items():
        torch.testing.assert_close(terms(changed)[name], value, msg=name)

    # a float mask behaves like the bool one
    as_float = call(batch[:-1] + (mask.double(),))
    torch.testing.assert_close(as_float.loss, base.loss)


def test_all_ones_mask_equals_no_mask():
    batch = random_batch((8, 4), seed=4)
    ones = torch.ones((8, 4), dtype=torch.bool)
    torch.testing.assert_close(call(batch[:-1] + (ones,)).loss, call(batch).loss)


def test_chunk_entropy_with_finer_logprobs():
    """A [B] entropy (e.g. a per-chunk estimate) is accepted with [B, C] log-probs."""
    new_lp, old_lp, adv, new_v, old_v, ret, ent, mask = random_batch((8, 4), seed=5, with_mask=True)
    ent_b = ent[:, 0]
    out = call((new_lp, old_lp, adv, new_v, old_v, ret, ent_b, mask))
    executed_rows = mask.any(dim=1)
    torch.testing.assert_close(out.stats["entropy"], ent_b[executed_rows].mean())


def test_normalize_advantages():
    adv = torch.randn(64, dtype=torch.float64) * 3.0 + 2.0
    out = normalize_advantages(adv)
    assert out.shape == adv.shape
    assert out.mean().item() == pytest.approx(0.0, abs=1e-12)
    assert out.std().item() == pytest.approx(1.0, abs=1e-6)
    # a constant batch does not blow up
    assert torch.isfinite(normalize_advantages(torch.ones(5))).all()
    assert torch.isfinite(normalize_advantages(torch.ones(1))).all()


@pytest.mark.parametrize("shape", SHAPES, ids=["chunk", "action", "token"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_decoupled_loss_matches_reference(shape, with_mask):
    batch = random_batch(shape, seed=5, with_mask=with_mask)
    behav = batch[1] + 0.3 * torch.randn(shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    out = call(batch, behaviour_logprobs=behav)
    expected = reference_ppo(*[x.tolist() if x is not None else None for x in batch], clip_vloss=True,
                             behav_lp=behav.tolist())
    for name, value in expected.items():
        torch.testing.assert_close(terms(out)[name], torch.tensor(value, dtype=torch.float64), msg=name)
    assert out.stats["policy_loss"] != call(batch).stats["policy_loss"]  # the weights matter


@pytest.mark.parametrize("shape", SHAPES, ids=["chunk", "action", "token"])
def test_decoupled_loss_with_an_up_to_date_behaviour_policy_is_ppo_to_the_last_bit(shape):
    batch = random_batch(shape, seed=2, with_mask=True)
    new_lp = batch[0].clone().requires_grad_(True)
    plain = call((new_lp, *batch[1:]))
    decoupled = call((new_lp, *batch[1:]), behaviour_logprobs=batch[1].clone())
    for name, value in terms(plain).items():
        assert torch.equal(terms(decoupled)[name], value), name
    (g1,) = torch.autograd.grad(plain.loss, new_lp)
    (g2,) = torch.autograd.grad(decoupled.loss, new_lp)
    assert torch.equal(g1, g2)


def test_reward_scale_scales_the_returns_the_value_head_learns():
    """``algorithm.reward_scale`` multiplies rewards before GAE: with values scaled alike, the advantages
    and returns are exactly those of the unscaled rewards times the scale."""
    from embodied.algorithms import compute_gae
    from embodied.algorithms.ppo import PPO
    from embodied.algorithms.ppo_config import PPOConfig
    from embodied.core.types import Trajectory

    g = torch.Generator().manual_seed(3)
    T, N, C, scale = 5, 3, 2, 0.25
    dones = torch.rand(T, N, generator=g) > 0.7

    def trajectory(value_scale: float) -> Trajectory:
        g.manual_seed(4)
        return Trajectory(
            forward_inputs={"x": torch.zeros(T, N, 1)}, actions=torch.zeros(T, N, C, 1),
            logprobs=torch.zeros(T, N), values=torch.randn(T, N, generator=g) * value_scale,
            rewards=torch.randn(T, N, C, generator=g) - 1.0, executed=torch.ones(T, N, C, dtype=torch.bool),
            dones=dones, terminated=dones, final_values=torch.zeros(T, N),
            next_values=torch.randn(N, generator=g) * value_scale, version=0)

    raw = trajectory(1.0)
    adv, ret = compute_gae(raw.rewards.sum(-1), raw.values, raw.dones, raw.terminated, raw.final_values,
                           raw.next_values, 0.9, 0.95)
    batch, _ = PPO(PPOConfig(gamma=0.9, gae_lambda=0.95, reward_scale=scale), ANY_SPEC).prepare([trajectory(scale)])
    assert torch.allclose(batch["advantages"], (adv * scale).reshape(-1), atol=1e-6)
    assert torch.allclose(batch["returns"], (ret * scale).reshape(-1), atol=1e-6)
    unscaled, _ = PPO(PPOConfig(gamma=0.9, gae_lambda=0.95), ANY_SPEC).prepare([raw])
    assert torch.allclose(unscaled["returns"], ret.reshape(-1))


def test_the_old_loss_record_name_is_an_alias_that_warns():
    import embodied.algorithms as algorithms

    with pytest.warns(FutureWarning, match="PPOLossOutput is embodied.algorithms.LossOutput now"):
        assert algorithms.PPOLossOutput is LossOutput

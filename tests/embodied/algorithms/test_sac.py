"""SAC's maths against plain Python loops, one transition and one critic at a time."""

from __future__ import annotations

import math

import pytest
import torch

from embodied.algorithms.sac import (policy_loss, bc_term, chunk_reward, critic_loss, n_step_returns, polyak_update,
                                     subset_min, td_target, temperature_loss)
from embodied.replay.buffer import following_rows


def random_chunks(B=6, C=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(B, C, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, C + 1, (B,), generator=g)  # executed sub-steps: a prefix of each chunk
    executed = torch.arange(C) < lengths[:, None]
    return torch.where(executed, rewards, 0.0), executed


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma", [0.99, 0.5, 1.0])
def test_chunk_reward_matches_loop(seed, gamma):
    rewards, executed = random_chunks(seed=seed)
    reward, discount = chunk_reward(rewards, executed, gamma)
    for b in range(rewards.shape[0]):
        total, factor = 0.0, 1.0
        for k in range(rewards.shape[1]):
            if executed[b, k]:
                total += factor * float(rewards[b, k])
                factor *= gamma
        assert float(reward[b]) == pytest.approx(total)
        assert float(discount[b]) == pytest.approx(factor)


def test_chunk_reward_ignores_unexecuted_entries():
    rewards = torch.tensor([[1.0, 2.0, 99.0]])
    executed = torch.tensor([[True, True, False]])
    reward, discount = chunk_reward(rewards, executed, 0.5)
    assert float(reward) == pytest.approx(1.0 + 0.5 * 2.0) and float(discount) == pytest.approx(0.25)


def random_rollout(T=7, N=3, C=3, seed=0):
    """[T, N, C] rewards and executed prefixes of a rollout epoch with auto-reset; episodes end in some chunks
    (``dones``), some of them by termination."""
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, C, generator=g, dtype=torch.float64)
    dones = torch.rand(T, N, generator=g) < 0.3
    terminated = dones & (torch.rand(T, N, generator=g) < 0.5)
    lengths = torch.where(dones, torch.randint(1, C + 1, (T, N), generator=g), C)  # an episode ends mid-chunk
    executed = torch.arange(C) < lengths[..., None]
    return torch.where(executed, rewards, 0.0), executed, dones, terminated


@pytest.mark.parametrize("always", [False, True], ids=["truncated", "always"])
@pytest.mark.parametrize("seed", [0, 1, 2, 4])  # draws in which both ends occur (seed 3 has no truncation)
@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_n_step_returns_match_a_loop_over_sub_steps(seed, n, always):
    rewards, executed, dones, terminated = random_rollout(seed=seed)
    assert terminated.any() and (dones & ~terminated).any()  # both ends occur in the draw
    T, N, C = rewards.shape
    gamma = 0.9
    reward, discount = chunk_reward(rewards, executed, gamma)
    reward_n, discount_n, bootstrap, last = n_step_returns(reward.reshape(-1), discount.reshape(-1),
                                                           terminated.reshape(-1), following_rows(dones), n,
                                                           bootstrap_terminations=always)
    for t in range(T):
        for e in range(N):
            total, factor, step = 0.0, 1.0, t
            while True:  # chunk by chunk, sub-step by sub-step
                for k in range(C):
                    if executed[step, e, k]:
                        total += factor * float(rewards[step, e, k])
                        factor *= gamma
                if dones[step, e] or step == T - 1 or step - t + 1 == n:
                    break
                step += 1
            row = t * N + e
            assert float(reward_n[row]) == pytest.approx(total), (t, e)
            assert float(discount_n[row]) == pytest.approx(factor), (t, e)
            assert int(last[row]) == step * N + e  # bootstrap from this chunk's next obs (final_obs if it ended)
            # a truncation still bootstraps; under bootstrap_at_done: always, a termination too (the window
            # still stops at it)
            assert bool(bootstrap[row]) == (always or not terminated[step, e])


def test_one_step_returns_are_the_chunks_themselves():
    rewards, executed, dones, terminated = random_rollout(seed=1)
    reward, discount = chunk_reward(rewards, executed, 0.99)
    out = n_step_returns(reward.reshape(-1), discount.reshape(-1), terminated.reshape(-1), following_rows(dones), 1)
    assert torch.equal(out[0], reward.reshape(-1)) and torch.equal(out[1], discount.reshape(-1))
    assert torch.equal(out[2], ~terminated.reshape(-1)) and torch.equal(out[3], torch.arange(reward.numel()))


@pytest.mark.parametrize("seed", range(3))
def test_td_target_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    B = 8
    reward, discount, next_q, next_logprob = (torch.randn(B, generator=g, dtype=torch.float64) for _ in range(4))
    bootstrap = torch.rand(B, generator=g) < 0.6
    alpha = 0.3
    target = td_target(reward, discount, bootstrap, next_q, next_logprob, alpha)
    for b in range(B):
        expected = float(reward[b])
        if bootstrap[b]:  # truncation or carry on: bootstrap from s' (final_obs where truncated)
            expected += float(discount[b]) * (float(next_q[b]) - alpha * float(next_logprob[b]))
        assert float(target[b]) == pytest.approx(expected)


def test_subset_min_is_the_min_over_the_drawn_critics():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(10, 5, generator=g)
    draw = torch.Generator().manual_seed(7)
    chosen = torch.randperm(10, generator=torch.Generator().manual_seed(7))[:2].tolist()
    out = subset_min(q, 2, draw)
    for b in range(5):
        assert float(out[b]) == min(float(q[e, b]) for e in chosen)
    assert torch.equal(subset_min(q, 10), q.min(0).values)  # the whole ensemble: clipped double-Q


def test_subset_min_draws_differ_between_calls():
    q = torch.arange(40.0).reshape(10, 4)
    g = torch.Generator().manual_seed(1)
    draws = {float(subset_min(q, 2, g)[0]) for _ in range(20)}
    assert len(draws) > 1


def test_critic_loss_matches_loop():
    g = torch.Generator().manual_seed(0)
    q, target = torch.randn(3, 7, generator=g), torch.randn(7, generator=g)
    expected = sum(sum((float(q[e, b]) - float(target[b])) ** 2 for b in range(7)) / 7 for e in range(3))
    assert float(critic_loss(q, target)) == pytest.approx(expected, rel=1e-5)


def test_actor_loss_matches_loop():
    g = torch.Generator().manual_seed(0)
    q, logprob = torch.randn(4, 6, generator=g), torch.randn(6, generator=g)
    alpha = 0.2
    expected = sum(alpha * float(logprob[b]) - sum(float(q[e, b]) for e in range(4)) / 4 for b in range(6)) / 6
    assert float(policy_loss(q, logprob, alpha)) == pytest.approx(expected, rel=1e-5)
    pessimistic = sum(alpha * float(logprob[b]) - min(float(q[e, b]) for e in range(4)) for b in range(6)) / 6
    assert float(policy_loss(q, logprob, alpha, "min")) == pytest.approx(pessimistic, rel=1e-5)


def test_bc_term_matches_loop_and_passes_no_gradient_to_the_critics_values():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(4, 6, generator=g, requires_grad=True)
    error = torch.rand(3, generator=g, requires_grad=True)
    scale = sum(abs(float(q[e, b])) for e in range(4) for b in range(6)) / 24
    expected = 0.5 * scale * sum(float(x) for x in error) / 3
    term = bc_term(error, q, 0.5)
    assert float(term) == pytest.approx(expected, rel=1e-5)
    term.backward()
    assert q.grad is None and torch.allclose(error.grad, torch.full((3,), 0.5 * scale / 3))


def test_temperature_loss_matches_loop_and_steers_alpha():
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    logprob = torch.tensor([1.0, -2.0, 0.5])
    target_entropy = -3.0
    loss = temperature_loss(log_alpha, logprob, target_entropy)
    expected = sum(-0.5 * (lp + target_entropy) for lp in logprob.tolist()) / 3
    assert float(loss.detach()) == pytest.approx(expected)
    loss.backward()
    # entropy -mean(logprob) = 0.17 > target -3: alpha should fall, i.e. a positive gradient on log_alpha
    assert float(log_alpha.grad) > 0


def test_polyak_update_matches_loop():
    target = [torch.tensor([0.0, 1.0]), torch.tensor([[2.0]])]
    online = [torch.tensor([1.0, 3.0]), torch.tensor([[-2.0]])]
    polyak_update(target, online, 0.25)
    assert target[0].tolist() == [0.25, 1.5] and target[1].tolist() == [[1.0]]

from __future__ import annotations

import pytest
import torch

from embodied.algorithms import compute_gae


def reference_gae(rewards, values, dones, terminated, final_values, next_values, gamma, lam):
    """Textbook GAE, one env and one step at a time, on plain Python floats."""
    T, N = len(rewards), len(rewards[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            if terminated[t][n]:
                next_value = 0.0
            elif dones[t][n]:
                next_value = final_values[t][n]
            elif t == T - 1:
                next_value = next_values[n]
            else:
                next_value = values[t + 1][n]
            delta = rewards[t][n] + gamma * next_value - values[t][n]
            if dones[t][n]:
                running = 0.0
            running = delta + gamma * lam * running
            adv[t][n] = running
    return adv


def random_inputs(T=7, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, N, generator=g, dtype=torch.float64)
    dones = torch.rand(T, N, generator=g) < 0.3
    terminated = dones & (torch.rand(T, N, generator=g) < 0.5)
    final_values = torch.randn(T, N, generator=g, dtype=torch.float64)
    next_values = torch.randn(N, generator=g, dtype=torch.float64)
    return rewards, values, dones, terminated, final_values, next_values


def gae(inputs, gamma=0.9, lam=0.8):
    return compute_gae(*inputs, gamma=gamma, gae_lambda=lam)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.7)])
def test_matches_reference(seed, gamma, lam):
    inputs = random_inputs(seed=seed)
    # make sure every kind of step shows up
    dones, terminated = inputs[2], inputs[3]
    assert terminated.any() and (dones & ~terminated).any() and (~dones).any()

    adv, ret = gae(inputs, gamma, lam)
    expected = torch.tensor(reference_gae(*[x.tolist() for x in inputs], gamma, lam), dtype=torch.float64)
    assert adv.shape == ret.shape == inputs[0].shape
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + inputs[1])


def test_terminated_step_does_not_bootstrap():
    rewards, values, dones, terminated, final_values, next_values = random_inputs(T=4, N=1)
    dones[:] = False
    terminated[:] = False
    dones[1, 0] = terminated[1, 0] = True
    dones[3, 0] = terminated[3, 0] = True  # last step terminated too: next_values is ignored
    base, _ = gae((rewards, values, dones, terminated, final_values, next_values))

    final_values2 = final_values + 100.0
    next_values2 = next_values + 100.0
    changed, _ = gae((rewards, values, dones, terminated, final_values2, next_values2))
    torch.testing.assert_close(changed, base)
    # and the advantage at the terminal step is just r - V
    torch.testing.assert_close(base[1, 0], rewards[1, 0] - values[1, 0])


def test_truncated_step_bootstraps_with_final_value():
    gamma, lam = 0.9, 0.8
    rewards, values, dones, terminated, final_values, next_values = random_inputs(T=4, N=1)
    dones[:] = False
    terminated[:] = False
    dones[2, 0] = True  # truncated at t=2
    base, _ = gae((rewards, values, dones, terminated, final_values, next_values), gamma, lam)

    bump = 1.5
    final_values2 = final_values.clone()
    final_values2[2, 0] += bump
    changed, _ = gae((rewards, values, dones, terminated, final_values2, next_values), gamma, lam)
    diff = changed - base
    # delta_2 moves by gamma * bump; earlier steps see it through the (gamma*lambda) recursion
    expected = torch.tensor([[(gamma * lam) ** 2], [gamma * lam], [1.0], [0.0]], dtype=torch.float64)
    torch.testing.assert_close(diff, gamma * bump * expected)
    # and values[3] (the reset obs of the next episode) is not what the truncated step bootstraps on
    torch.testing.assert_close(base[2, 0], rewards[2, 0] + gamma * final_values[2, 0] - values[2, 0])


def test_last_step_bootstraps_with_next_values():
    gamma, lam = 0.9, 0.8
    inputs = list(random_inputs(T=3, N=2))
    inputs[2][:] = False
    inputs[3][:] = False
    base, _ = gae(inputs, gamma, lam)
    inputs[5] = inputs[5] + torch.tensor([1.0, 0.0], dtype=torch.float64)
    changed, _ = gae(inputs, gamma, lam)
    expected = gamma * torch.tensor([[(gamma * lam) ** 2, 0.0], [gamma * lam, 0.0], [1.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(changed - base, expected)


@pytest.mark.parametrize("terminal", [True, False])
def test_no_leakage_across_episode_boundary(terminal):
    rewards, values, dones, terminated, final_values, next_values = random_inputs(T=6, N=3)
    dones[:] = False
    terminated[:] = False
    dones[2] = True
    terminated[2] = terminal
    base, _ = gae((rewards, values, dones, terminated, final_values, next_values))

    # everything after the boundary belongs to another episode
    values2, rewards2, final_values2 = values.clone(), rewards.clone(), final_values.clone()
    values2[3:] += torch.randn(3, 3, dtype=torch.float64)
    rewards2[3:] += torch.randn(3, 3, dtype=torch.float64)
    final_values2[3:] += 5.0
    changed, _ = gae((rewards2, values2, dones, terminated, final_values2, next_values + 7.0))
    torch.testing.assert_close(changed[:3], base[:3])
    assert not torch.allclose(changed[3:], base[3:])

    # V of the first step after the boundary (the reset obs) only enters its own advantage
    values3 = values.clone()
    values3[3] += 0.25
    changed3, _ = gae((rewards, values3, dones, terminated, final_values, next_values))
    expected = torch.zeros_like(base)
    expected[3] = -0.25
    torch.testing.assert_close(changed3 - base, expected)


def test_gamma_one_lambda_one_is_monte_carlo():
    T, N = 6, 2
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, N, generator=g, dtype=torch.float64)
    dones = torch.zeros(T, N, dtype=torch.bool)
    dones[2, 0] = True
    dones[4, 1] = True
    dones[T - 1] = True
    terminated = dones.clone()  # all episodes end in a true terminal state
    final_values = torch.randn(T, N, generator=g, dtype=torch.float64)
    next_values = torch.randn(N, generator=g, dtype=torch.float64)

    adv, ret = compute_gae(rewards, values, dones, terminated, final_values, next_values, gamma=1.0, gae_lambda=1.0)

    mc = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        total = 0.0
        for t in reversed(range(T)):
            if dones[t, n]:
                total = 0.0
            total += rewards[t, n].item()
            mc[t, n] = total
    torch.testing.assert_close(ret, mc)
    torch.testing.assert_close(adv, mc - values)


def test_truncated_monte_carlo_includes_bootstrap():
    """gamma=lambda=1 with truncation: the return is the reward sum plus V(final_obs)."""
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    values = torch.tensor([[0.5], [-1.0], [2.0]], dtype=torch.float64)
    dones = torch.tensor([[False], [True], [False]])
    terminated = torch.zeros(3, 1, dtype=torch.bool)
    final_values = torch.tensor([[9.0], [10.0], [9.0]], dtype=torch.float64)
    next_values = torch.tensor([4.0], dtype=torch.float64)
    _, ret = compute_gae(rewards, values, dones, terminated, final_values, next_values, gamma=1.0, gae_lambda=1.0)
    torch.testing.assert_close(ret, torch.tensor([[13.0], [12.0], [7.0]], dtype=torch.float64))


def test_float32_and_no_python_loop_over_envs_shapes():
    inputs = [x.float() if x.is_floating_point() else x for x in random_inputs(T=3, N=1000)]
    adv, ret = gae(inputs)
    assert adv.dtype == ret.dtype == torch.float32
    assert adv.shape == (3, 1000)


def test_bootstrapping_terminations_values_a_terminal_step_as_a_truncated_one():
    """PPO's ``bootstrap_at_done: always`` (ManiSkill's baselines): a termination adds V(final_obs) as a truncation
    does; without it the same step adds nothing."""
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    values = torch.tensor([[0.5], [-1.0], [2.0]], dtype=torch.float64)
    dones = torch.tensor([[False], [True], [False]])
    terminated = dones.clone()
    final_values = torch.tensor([[9.0], [10.0], [9.0]], dtype=torch.float64)
    next_values = torch.tensor([4.0], dtype=torch.float64)
    args = (rewards, values, dones, terminated, final_values, next_values)
    _, plain = compute_gae(*args, gamma=1.0, gae_lambda=1.0)
    _, always = compute_gae(*args, gamma=1.0, gae_lambda=1.0, bootstrap_terminations=True)
    torch.testing.assert_close(plain, torch.tensor([[3.0], [2.0], [7.0]], dtype=torch.float64))
    torch.testing.assert_close(always, torch.tensor([[13.0], [12.0], [7.0]], dtype=torch.float64))
    truncated = compute_gae(rewards, values, dones, torch.zeros_like(dones), final_values, next_values, gamma=1.0,
                            gae_lambda=1.0)[1]
    torch.testing.assert_close(always, truncated)

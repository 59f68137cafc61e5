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


def finite_horizon_by_definition(rewards, values, dones, terminated, final_values, next_values, gamma, lam,
                                 bootstrap_terminations):
    """Each step's lambda-weighted mean of the k-step returns that end at or before its episode's or the rollout's
    last step, normalized by the weights used: eq. 16 of the GAE paper, written out."""
    T, N = len(rewards), len(rewards[0])
    out = [[0.0] * N for _ in range(T)]
    for n in range(N):
        def after(t):  # the value of the state after step t, as the env workers give it
            if dones[t][n]:
                return 0.0 if terminated[t][n] and not bootstrap_terminations else final_values[t][n]
            return values[t + 1][n] if t + 1 < T else next_values[n]
        for t in range(T):
            last = t
            while not dones[last][n] and last + 1 < T:
                last += 1
            mean, weights = 0.0, 0.0
            for k in range(1, last - t + 2):
                g = sum(gamma ** i * rewards[t + i][n] for i in range(k)) + gamma ** k * after(t + k - 1)
                mean += lam ** (k - 1) * g
                weights += lam ** (k - 1)
            out[t][n] = mean / weights - values[t][n]
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma,lam", [(0.8, 0.9), (0.99, 0.95), (0.5, 0.0), (1.0, 1.0)])
@pytest.mark.parametrize("bootstrap_terminations", [False, True])
def test_finite_horizon_gae_is_the_normalized_mean_of_the_k_step_returns(seed, gamma, lam, bootstrap_terminations):
    inputs = random_inputs(T=9, N=4, seed=seed)
    adv, ret = compute_gae(*inputs, gamma=gamma, gae_lambda=lam, bootstrap_terminations=bootstrap_terminations,
                           finite_horizon=True)
    expected = finite_horizon_by_definition(*[x.tolist() for x in inputs], gamma, lam, bootstrap_terminations)
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))
    torch.testing.assert_close(ret, adv + inputs[1])


def test_finite_horizon_gae_differs_from_the_usual_only_where_the_horizon_is_cut():
    """With lambda 0 both are TD(0); otherwise the usual GAE gives a step k steps before a boundary the weight
    (1 - lambda) sum_(i<k) lambda^i on its k-step returns, which the finite-horizon one normalizes to 1."""
    inputs = random_inputs(seed=3)
    td0 = [compute_gae(*inputs, gamma=0.9, gae_lambda=0.0, finite_horizon=f)[0] for f in (False, True)]
    torch.testing.assert_close(td0[0], td0[1])
    rewards, values = torch.zeros(4, 1, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64)
    no_end = torch.zeros(4, 1, dtype=torch.bool)
    # Only the rollout's last bootstrap is non-zero: every k-step return from step t is 0 but the longest.
    args = (rewards, values, no_end, no_end, torch.zeros(4, 1, dtype=torch.float64), torch.tensor([1.0],
            dtype=torch.float64))
    usual = compute_gae(*args, gamma=1.0, gae_lambda=0.5)[0][:, 0]
    finite = compute_gae(*args, gamma=1.0, gae_lambda=0.5, finite_horizon=True)[0][:, 0]
    k = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)  # returns left from each step
    torch.testing.assert_close(usual, 0.5 ** (k - 1))  # the usual: lambda^(K-1) of the mass on the bootstrap
    torch.testing.assert_close(finite, 0.5 ** (k - 1) / ((1 - 0.5 ** k) / 0.5))  # over the weights used

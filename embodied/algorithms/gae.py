"""Generalized Advantage Estimation over chunk steps.

One step here is one action chunk: ``rewards[t]`` is already the sum of the rewards of the
sub-steps the chunk executed. ``T`` is the number of chunk steps, ``N`` the number of envs.
"""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    terminated: torch.Tensor,
    final_values: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    bootstrap_terminations: bool = False,
    finite_horizon: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) advantages and returns, bootstrapping on truncation (and on termination too with
    ``bootstrap_terminations``: PPO's ``bootstrap_at_done: always``).

    With ``finite_horizon`` the advantage is the lambda-weighted mean of the k-step returns that fit before the
    episode's or the rollout's end, normalized by the sum of the weights used (Schulman et al. 2016, eq. 16,
    truncated; ManiSkill's PPO baselines' ``finite_horizon_gae``). The usual GAE normalizes by ``1 - lambda`` as if
    the sum went on for ever, so a step near the end weighs its last bootstrap by all the remaining mass.

    Args:
        rewards: float [T, N], reward of step t (summed over the chunk).
        values: float [T, N], V(obs_t).
        dones: bool [T, N], the episode ended at step t (terminated or truncated).
        terminated: bool [T, N], the episode ended at step t in a true terminal state.
        final_values: float [T, N], V(final_obs_t) of the terminal observation; only read
            where the step was truncated (done and not terminated), or done with ``bootstrap_terminations``.
        next_values: float [N], V(obs after the last step T-1).
        gamma: discount per chunk step.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, both float [T, N], with ``returns = advantages + values``.
    """
    T = rewards.shape[0]
    dones = dones.bool()
    terminated = terminated.bool() & dones  # a terminal step is always a done step
    if bootstrap_terminations:  # every end bootstraps from its final observation, as a truncation does
        terminated = torch.zeros_like(dones)
    truncated = dones & ~terminated

    # Value of the state reached after step t, before any auto-reset:
    # V(obs_{t+1}) while the episode goes on, V(final_obs) on truncation, 0 on termination.
    following = torch.cat([values[1:], next_values.unsqueeze(0)], dim=0)
    next_v = torch.where(truncated, final_values, following)
    next_v = torch.where(terminated, torch.zeros_like(next_v), next_v)

    if finite_horizon:
        return _finite_horizon(rewards, values, dones, next_v, gamma, gae_lambda)
    deltas = rewards + gamma * next_v - values
    # The recursion must stop at episode boundaries: A_{t+1} belongs to the next episode.
    carry = gamma * gae_lambda * (~dones).to(values.dtype)

    advantages = torch.zeros_like(values)
    last = torch.zeros_like(values[0])
    for t in reversed(range(T)):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def _finite_horizon(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_v: torch.Tensor,
                    gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The finite-horizon advantages: for K k-step returns G_k left before a boundary (done or rollout end),
    A_t = sum_k lambda^(k-1) G_k / sum_k lambda^(k-1) - V(s_t), kept as three running sums backwards in time."""
    live = (~dones).to(values.dtype)  # the sums restart where an episode ended at step t
    weights = torch.zeros_like(values[0])  # sum of lambda^(k-1) over the k-step returns from t
    reward_sum = torch.zeros_like(values[0])  # their rewards, each weighted by the returns that contain it
    value_sum = torch.zeros_like(values[0])  # their discounted bootstraps
    advantages = torch.zeros_like(values)
    for t in reversed(range(rewards.shape[0])):
        weights = 1 + gae_lambda * weights * live[t]
        reward_sum = gae_lambda * gamma * reward_sum * live[t] + weights * rewards[t]
        value_sum = gae_lambda * gamma * value_sum * live[t] + gamma * next_v[t]
        advantages[t] = (reward_sum + value_sum) / weights - values[t]
    return advantages, advantages + values

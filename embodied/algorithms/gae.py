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
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) advantages and returns, bootstrapping on truncation (and on termination too with
    ``bootstrap_terminations``: PPO's ``bootstrap_at_done: always``).

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

    deltas = rewards + gamma * next_v - values
    # The recursion must stop at episode boundaries: A_{t+1} belongs to the next episode.
    carry = gamma * gae_lambda * (~dones).to(values.dtype)

    advantages = torch.zeros_like(values)
    last = torch.zeros_like(values[0])
    for t in reversed(range(T)):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values

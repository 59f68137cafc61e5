"""Chunk transitions as replay holds them, shared by every off-policy learner: a chunk's reward and bootstrap
discount (``chunk_reward``), n-step returns over chunks (``n_step_returns``), and the batch a learner steps on
(``ReplaySample``). Pure functions of tensors; ``embodied.replay.buffer`` and ``embodied.replay.demos`` store their rows."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def chunk_reward(rewards: torch.Tensor, executed: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reward of a chunk and the discount of its bootstrap.

    Args:
        rewards: [B, C] per sub-step (0 where not executed).
        executed: bool [B, C]; the executed sub-steps of a chunk are a prefix (it stops where the episode ends).
        gamma: discount per sub-step.

    Returns:
        ``sum_k gamma^k r_k`` over the executed sub-steps [B], and ``gamma ** (executed sub-steps)`` [B].
    """
    powers = gamma ** torch.arange(rewards.shape[-1], dtype=rewards.dtype)
    reward = (torch.where(executed, rewards, torch.zeros_like(rewards)) * powers).sum(-1)
    discount = gamma ** executed.sum(-1).to(rewards.dtype)
    return reward, discount


def n_step_returns(reward: torch.Tensor, discount: torch.Tensor, terminated: torch.Tensor, following: torch.Tensor,
                   n: int, bootstrap_terminations: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns over chunk transitions: each row's reward summed with those of the (up to) n - 1 chunks
    after it, each discounted by the chunks before it, and the bootstrap of the last chunk summed.

    Args:
        reward, discount: [M] of one chunk each (``chunk_reward``): its discounted reward and ``gamma ** executed``.
        terminated: bool [M], the episode terminated inside the row's chunk.
        following: int64 [M], the row of the chunk after this one in the same episode, or -1 where none is known
            (the episode ended in this chunk, or the data stops here: a rollout epoch's last chunk step).
        n: chunks per return (1: each row as it is).
        bootstrap_terminations: a terminated window bootstraps too, as a truncated one does (TD's
            ``bootstrap_at_done: always``); the window still stops at its episode's end.

    Returns:
        ``reward_n [M]`` (``sum_j (prod_{i<j} discount_i) reward_j`` over the window), ``discount_n [M]`` (the
        product of the window's discounts), ``bootstrap [M]`` (False where the window's last chunk terminated; a
        truncation bootstraps from its ``final_obs``) and ``last`` int64 [M], the row whose next obs the target
        bootstraps from. A window stops early where ``following`` is -1.
    """
    reward_n, discount_n = reward.clone(), discount.clone()
    last = torch.arange(len(reward))
    ahead = following.clone()
    for _ in range(n - 1):
        extend = ahead >= 0
        row = ahead.clamp(min=0)
        reward_n = torch.where(extend, reward_n + discount_n * reward[row], reward_n)
        discount_n = torch.where(extend, discount_n * discount[row], discount_n)
        last = torch.where(extend, row, last)
        ahead = torch.where(extend, following[row], -1)
    bootstrap = torch.ones_like(terminated) if bootstrap_terminations else ~terminated[last]
    return reward_n, discount_n, bootstrap, last


@dataclass
class ReplaySample:
    """A batch of chunk transitions drawn from replay (``embodied.replay.buffer.ReplayBuffer.sample``)."""

    obs: dict[str, torch.Tensor]  # each [B, ...], as the env gave it
    actions: torch.Tensor  # float32 [B, C, A]
    reward: torch.Tensor  # float32 [B], discounted over the chunk's executed sub-steps
    discount: torch.Tensor  # float32 [B], gamma ** executed sub-steps
    bootstrap: torch.Tensor  # bool [B], False where the episode terminated in the chunk
    next_obs: dict[str, torch.Tensor]  # each [B, ...], final_obs where the episode ended
    demo_rows: int = 0  # the first rows are demonstrations (RLPD's ``algorithm.demo_ratio`` of the batch)
    iteration: int = 1  # the run's iteration (1-based) the batch trains in: what a learner schedules by (warm-up)

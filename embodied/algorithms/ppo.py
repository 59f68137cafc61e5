"""Clipped PPO loss for policies whose log-probabilities come per chunk, action or token.

``B`` is the batch of chunk steps, ``C`` the chunk length and ``A`` the action dimension (or the
number of tokens per action). Advantages, values and returns are per chunk step: [B].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from embodied.algorithms.base import Averages, LossOutput, RolloutReset, flatten
from embodied.algorithms.gae import compute_gae
from embodied.types import Trajectory

if TYPE_CHECKING:
    from embodied.algorithms.ppo_config import PPOConfig


@dataclass
class PPOLossOutput:
    """Scalar tensors. Only ``loss`` carries gradient; the rest are for logging."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_frac: torch.Tensor


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is nonzero (all entries if None)."""
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    # where() rather than x * mask so a NaN/inf in a masked-out entry cannot leak in.
    return torch.where(mask != 0, x * mask, torch.zeros_like(x)).sum() / mask.sum().clamp_min(1e-8)


def _mask_like(mask: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """Reduce ``mask`` to the leading dims of ``x``: a coarser entry counts if any sub-entry does."""
    if mask is None or mask.dim() == x.dim():
        return mask
    return (mask != 0).flatten(start_dim=x.dim()).any(dim=-1)


def _expand_trailing(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast a [B] tensor over the trailing dims of ``like`` ([B], [B, C] or [B, C, A])."""
    return x.reshape(x.shape + (1,) * (like.dim() - x.dim())).expand_as(like)


def normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Standardize advantages to zero mean and unit std over all entries; same shape as ``adv``."""
    if adv.numel() < 2:  # the (unbiased) std of one sample is undefined
        return adv - adv.mean()
    return (adv - adv.mean()) / (adv.std() + eps)


def ppo_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    clip_vloss: bool = True,
    mask: torch.Tensor | None = None,
    behaviour_logprobs: torch.Tensor | None = None,
    averages: Averages | None = None,
) -> PPOLossOutput:
    """Clipped-surrogate PPO loss with an (optionally clipped) value loss and entropy bonus.

    Decoupled PPO (Hilton et al. 2022, as AReaL trains asynchronously): when the data was
    collected by an older policy than the one the update starts from, ``old_logprobs`` are the
    *proximal* policy's (the actor's weights at the start of the update) and the ratio is clipped
    around it, while ``behaviour_logprobs`` (the policy that acted) weight each term by
    pi_prox / pi_behav (no gradient). With ``behaviour_logprobs`` equal to ``old_logprobs`` the
    weight is exactly 1 and the loss is PPO's, bit for bit.

    Args:
        new_logprobs: [B], [B, C] or [B, C, A], log-probs under the current policy.
        old_logprobs: same shape, log-probs under the rollout policy (the proximal policy when
            ``behaviour_logprobs`` is given).
        advantages: [B], broadcast over the trailing dims of the log-probs.
        new_values: [B], current value predictions.
        old_values: [B], value predictions at rollout time.
        returns: [B], value targets.
        entropy: policy entropy, same shape as the log-probs or any leading part of it ([B]).
        clip_coef: PPO clip range epsilon, used for both the ratio and the value clip.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        clip_vloss: clip the value update around ``old_values`` as in PPO2.
        mask: bool/float, same shape as the log-probs; zero marks sub-steps the env did not
            execute (e.g. after a done inside a chunk). Every average is a masked mean; for the
            coarser [B] value loss (and a coarser entropy) an entry counts if any of its
            sub-steps is unmasked, so only fully masked rows (padding) drop out.
        behaviour_logprobs: same shape, log-probs under the policy that collected the data
            (decoupled PPO); None: the rollout policy is the proximal one.
        averages: the batch is one part of a larger minibatch (micro-batches, actor ranks): every
            masked mean is this part's share of the whole one (``Averages``; needs ``mask``).

    Returns:
        PPOLossOutput of scalar tensors.
    """
    def mean(x: torch.Tensor, m: torch.Tensor | None) -> torch.Tensor:
        return averages.mean(x, mask) if averages is not None and mask is not None else _masked_mean(x, m)

    logratio = new_logprobs - old_logprobs
    ratio = logratio.exp()
    adv = _expand_trailing(advantages, ratio)

    # Pessimistic bound: take the worse of the unclipped and clipped surrogate.
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2)
    if behaviour_logprobs is not None:  # importance weight of the stale behaviour policy, held constant
        pg_loss = pg_loss * (old_logprobs - behaviour_logprobs).detach().exp()
    policy_loss = mean(pg_loss, mask)

    if clip_vloss:
        v_loss_unclipped = (new_values - returns) ** 2
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = torch.max(v_loss_unclipped, v_loss_clipped)
    else:
        v_loss = (new_values - returns) ** 2
    # Values are per chunk step: a step counts if any of its sub-steps was executed.
    value_loss = 0.5 * mean(v_loss, _mask_like(mask, v_loss))

    entropy_mean = mean(entropy, _mask_like(mask, entropy))

    loss = policy_loss - ent_coef * entropy_mean + vf_coef * value_loss

    with torch.no_grad():
        # k3 estimator of KL(old || new): unbiased and always >= 0 (Schulman, "Approximating KL").
        approx_kl = mean((ratio - 1.0) - logratio, mask)
        clip_frac = mean(((ratio - 1.0).abs() > clip_coef).to(ratio.dtype), mask)

    return PPOLossOutput(
        loss=loss,
        policy_loss=policy_loss,
        value_loss=value_loss,
        entropy=entropy_mean,
        approx_kl=approx_kl,
        clip_frac=clip_frac,
    )


class PPO:
    """Clipped PPO with GAE over chunk steps (``algorithm.name: ppo``)."""

    uses_values = True
    summed_metrics: frozenset[str] = frozenset()  # no batch metrics

    def __init__(self, cfg: PPOConfig) -> None:
        self.cfg = cfg

    def rollout_reset(self, iteration: int, num_envs: int, seed: int) -> RolloutReset | None:
        return None  # episodes run on across rollout epochs (auto-reset)

    def prepare(self, trajectories: list[Trajectory]) -> tuple[dict[str, Any], dict[str, float]]:
        traj = Trajectory.concat(trajectories)
        rewards = traj.rewards.sum(-1) * self.cfg.reward_scale  # the value head predicts scaled returns
        advantages, returns = compute_gae(rewards, traj.values, traj.dones, traj.terminated,
                                          traj.final_values, traj.next_values, self.cfg.gamma, self.cfg.gae_lambda)
        return flatten(traj, advantages, returns), {}

    def loss(self, logprobs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, mb: dict[str, Any],
             mask: torch.Tensor, warmup: bool, averages: Averages | None = None) -> LossOutput:
        c = self.cfg
        adv = mb["advantages"]
        if c.normalize_advantages:  # over the whole minibatch, also when it is computed in parts
            adv = normalize_advantages(adv) if averages is None else averages.normalize(adv)
        out = ppo_loss(logprobs, mb["logprobs"], adv, values, mb["values"], mb["returns"], entropy,
                       clip_coef=c.clip_coef, vf_coef=c.vf_coef, ent_coef=c.ent_coef, clip_vloss=c.clip_vloss,
                       mask=mask, behaviour_logprobs=mb.get("behaviour_logprobs"), averages=averages)
        # Critic warm-up: the value head learns the (SFT) policy's returns before the policy moves.
        loss = c.vf_coef * out.value_loss if warmup else out.loss
        stats = {"policy_loss": out.policy_loss, "value_loss": out.value_loss, "entropy": out.entropy,
                 "approx_kl": out.approx_kl, "clip_frac": out.clip_frac}
        return LossOutput(loss, stats)

"""GRPO for embodied episodes (``algorithm.name: grpo``): group-relative advantages, no critic.

Every rollout epoch resets all envs, ``algorithm.group_size`` consecutive envs from one seed (so
a group starts from the same state), with auto-reset off, and runs until every episode has
ended: one episode per env. An env's score is its episode return (or its success, with
``algorithm.grpo_score: success``); its advantage is the score standardised within its group,
the same for each of its executed sub-steps. Groups whose scores are all equal carry no signal:
they are dropped (their advantages masked) and counted. The loss is the clipped surrogate with
an asymmetric clip ``[1 - clip_coef_low, 1 + clip_coef_high]`` (DAPO's clip-higher) and no value
loss, averaged over executed sub-steps, or over episodes with ``algorithm.grpo_loss_mean: episode``
(see ``episode_mean_weights``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from embodied.algorithms.base import Averages, LearnerSpec, LossOutput, flatten, masked_mean
from embodied.algorithms.batch import expand_rows
from embodied.algorithms.ppo import PPO
from embodied.core.types import Trajectory

if TYPE_CHECKING:
    from embodied.algorithms.grpo_config import GRPOConfig



def group_advantages(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores [N] standardised within consecutive groups of ``group_size``.

    Returns ``(advantages [N], kept [N] bool)``: ``(s - mean_g) / (std_g + eps)`` with the
    population std of the group, and whether the env's group has any spread (all-equal groups
    get advantage 0 and ``kept`` False).
    """
    if scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not split into groups of {group_size}")
    groups = scores.double().view(-1, group_size)
    mean = groups.mean(1, keepdim=True)
    std = groups.std(1, unbiased=False, keepdim=True)
    kept = (groups.max(1, keepdim=True).values - groups.min(1, keepdim=True).values) > 0
    adv = torch.where(kept, (groups - mean) / (std + eps), torch.zeros_like(groups))
    return adv.view(-1).to(scores.dtype), kept.expand_as(groups).reshape(-1)


def episode_mean_weights(executed: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Per-env advantage weights [N] that turn the loss's mean over sub-steps into a mean over episodes.

    ``executed`` [T, N, ...] marks each env's executed sub-steps, ``kept`` [N] its group's spread. The
    loss averages over every executed sub-step, so an episode counts as much as it is long. A success
    ends its episode early, so under that mean a group's failures outweigh its successes: the group's
    advantages no longer sum to zero over the loss, and every update also pushes down whatever was
    sampled. Scaling each kept env's advantage by (mean length of the kept episodes) / (its length)
    gives every episode the same total weight at the same overall scale, the surrogate being linear in
    the advantage. Dropped envs get 0.
    """
    lengths = executed.transpose(0, 1).flatten(1).sum(1).double()
    if not bool(kept.any()):
        return torch.zeros_like(lengths)
    return torch.where(kept, lengths[kept].mean() / lengths.clamp_min(1.0), torch.zeros_like(lengths))


def grpo_loss(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_low: float, clip_high: float,
              averages: Averages | None = None) -> dict[str, torch.Tensor]:
    """Clipped surrogate with an asymmetric clip, masked mean over the log-prob entries.

    ``advantages`` [B] broadcast over the trailing dims of the log-probs ([B], [B, C] or [B, C, A]);
    ``mask`` has the log-probs' shape (executed sub-steps of kept groups). With ``averages`` the batch is
    one part of a larger minibatch and the means are its share of the whole one's.
    """
    logratio = new_logprobs - old_logprobs
    ratio = logratio.exp()
    adv = expand_rows(advantages, ratio)
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv)
    weight = mask.to(ratio.dtype)
    denom = (weight.sum() if averages is None else averages.count(mask, ratio)).clamp_min(1.0)
    loss = -torch.where(weight > 0, surrogate * weight, torch.zeros_like(surrogate)).sum() / denom
    with torch.no_grad():
        approx_kl = (torch.where(weight > 0, (ratio - 1) - logratio, torch.zeros_like(ratio)) * weight).sum() / denom
        clipped = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(ratio.dtype)
        clip_frac = (clipped * weight).sum() / denom
    return {"loss": loss, "approx_kl": approx_kl, "clip_frac": clip_frac}


class GRPO(PPO):
    """Group-relative policy optimisation over whole episodes (see the module docstring): PPO's update
    (``PPO.update``: epochs, minibatches, KL stop, learning-rate schedule) with its own advantages (``prepare``) and
    loss (``loss``), and no critic."""

    uses_values: ClassVar[bool] = False
    prefix: ClassVar[str] = "grpo"  # its own metrics' prefix (a variant's: its name)
    summed_metrics: ClassVar[frozenset[str]] = frozenset({"grpo/groups", "grpo/dropped_groups"})
    cfg: GRPOConfig  # type: ignore[assignment]

    def __init__(self, cfg: GRPOConfig, spec: LearnerSpec) -> None:
        super().__init__(cfg, spec)  # type: ignore[arg-type]

    def prepare(self, trajectories: list[Trajectory]) -> tuple[dict[str, Any], dict[str, float]]:
        """The flat batch with each env's group-relative advantage on its steps (returns unused: zeros), its dropped
        groups masked out, and counts of groups and dropped groups."""
        traj = Trajectory.concat(trajectories)
        scores = self._scores(trajectories, traj)
        adv, kept = self.advantages(scores)
        if self.cfg.grpo_loss_mean == "episode":
            adv = adv * episode_mean_weights(traj.executed, kept).to(adv.dtype)
        steps = traj.executed.shape[0]
        advantages = adv.float().unsqueeze(0).expand(steps, -1)
        # A dropped group's steps are masked out of the loss through "executed" (a copy: the rollout's
        # trajectories still count every step run).
        masked = dataclasses.replace(traj, executed=traj.executed & kept.view(1, -1, 1))
        batch = flatten(masked, advantages, torch.zeros_like(advantages))
        groups = kept.numel() // self.cfg.group_size
        dropped = groups - int(kept.view(groups, -1)[:, 0].sum())
        return batch, {f"{self.prefix}/groups": float(groups), f"{self.prefix}/dropped_groups": float(dropped),
                       f"{self.prefix}/score_mean": float(scores.mean())}

    def advantages(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each env's advantage [N] from its episode's score [N], and whether its group is kept: the score
        standardised within its group (``group_advantages``). What a critic-free variant replaces."""
        return group_advantages(scores, self.cfg.group_size)

    def _scores(self, parts: list[Trajectory], traj: Trajectory) -> torch.Tensor:
        """Episode return (or success) per env, in the concatenated env order."""
        if self.cfg.grpo_score == "return":
            return (traj.rewards * traj.executed).sum(dim=(0, 2)).double()
        success = torch.zeros(traj.executed.shape[1], dtype=torch.float64)
        offset = 0
        for part in parts:
            for e in part.episodes:
                success[offset + e.env_index] = float(e.success_once)
            offset += part.executed.shape[1]
        return success

    def loss(self, logprobs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, mb: dict[str, Any],
             mask: torch.Tensor, warmup: bool, averages: Averages | None = None) -> LossOutput:
        """The asymmetric clipped surrogate minus the entropy bonus (no value loss: ``warmup`` changes nothing)."""
        c = self.cfg
        low = c.clip_coef_low if c.clip_coef_low is not None else c.clip_coef
        high = c.clip_coef_high if c.clip_coef_high is not None else c.clip_coef
        out = grpo_loss(logprobs, mb["logprobs"], mb["advantages"], mask, low, high, averages)
        ent = masked_mean(entropy, mask, averages)
        loss = out["loss"] - c.ent_coef * ent
        return LossOutput(loss, {"policy_loss": out["loss"].detach(), "entropy": ent.detach(),
                                 "approx_kl": out["approx_kl"], "clip_frac": out["clip_frac"]})


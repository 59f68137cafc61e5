"""PPO (``algorithm.name: ppo``): the clipped loss as pure functions, and ``PPO``, the on-policy learner.

``B`` is the batch of chunk steps, ``C`` the chunk length and ``A`` the action dimension (or the
number of tokens per action). Advantages, values and returns are per chunk step: [B].

``PPO.update`` is one update, read top to bottom: advantages (``prepare``: GAE), then ``update_epochs``
passes of ``num_minibatches`` minibatches in a fresh random order, each one gradient step at the learning
rate ``learning_rate`` gives it, stopping early once a pass's mean ``approx_kl`` exceeds ``target_kl``. A
minibatch is computed in parts (``ctx.micro_batches``, and the actor ranks' shares) whose means are shares of
the whole minibatch's (``Averages``), so that any split takes the same step. GRPO (``grpo.GRPO``) is this loop
with its own advantages (``prepare``) and loss (``loss``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from embodied.algorithms.base import (Averages, LearnerSpec, LossOutput, RankGroup, UpdateContext,
                                      expand_mask, flatten, masked_mean)
from embodied.algorithms.batch import expand_rows, take, to_device
from embodied.algorithms.gae import compute_gae
from embodied.algorithms.schedule import learning_rate
from embodied.core.numerics import NonFiniteUpdateError, non_finite_terms
from embodied.core.types import Trajectory

if TYPE_CHECKING:
    from embodied.algorithms.ppo_config import PPOConfig


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
) -> LossOutput:
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
        ``LossOutput``: the loss, and its terms as stats (``policy_loss``, ``value_loss``, ``entropy``, with their
        gradients) with ``approx_kl`` and ``clip_frac`` (without).
    """
    logratio = new_logprobs - old_logprobs
    ratio = logratio.exp()
    adv = expand_rows(advantages, ratio)

    # Pessimistic bound: take the worse of the unclipped and clipped surrogate.
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2)
    if behaviour_logprobs is not None:  # importance weight of the stale behaviour policy, held constant
        pg_loss = pg_loss * (old_logprobs - behaviour_logprobs).detach().exp()
    policy_loss = masked_mean(pg_loss, mask, averages)

    if clip_vloss:
        v_loss_unclipped = (new_values - returns) ** 2
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = torch.max(v_loss_unclipped, v_loss_clipped)
    else:
        v_loss = (new_values - returns) ** 2
    # Values are per chunk step: a step counts if any of its sub-steps was executed.
    value_loss = 0.5 * masked_mean(v_loss, mask, averages)

    entropy_mean = masked_mean(entropy, mask, averages)

    loss = policy_loss - ent_coef * entropy_mean + vf_coef * value_loss

    with torch.no_grad():
        # k3 estimator of KL(old || new): unbiased and always >= 0 (Schulman, "Approximating KL").
        approx_kl = masked_mean((ratio - 1.0) - logratio, mask, averages)
        clip_frac = masked_mean(((ratio - 1.0).abs() > clip_coef).to(ratio.dtype), mask, averages)

    return LossOutput(loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy_mean,
                             "approx_kl": approx_kl, "clip_frac": clip_frac})


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns): how much of the returns the value head predicts (nan if constant)."""
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - values).var() / var)


class PPO:
    """Clipped PPO with GAE over chunk steps (``algorithm.name: ppo``), an ``OnPolicyLearner``."""

    uses_values: ClassVar[bool] = True  # the value head trains: explained variance is logged
    summed_metrics: ClassVar[frozenset[str]] = frozenset()  # no batch metrics

    def __init__(self, cfg: PPOConfig, spec: LearnerSpec) -> None:
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(spec.seed)  # the minibatch order, the same on every rank

    def new_optimizer(self, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
        """Adam with the algorithm's epsilon (``learning_rate`` sets the rate of every step)."""
        return torch.optim.Adam(params, lr=lr, eps=self.cfg.adam_eps)

    def prepare(self, trajectories: list[Trajectory]) -> tuple[dict[str, Any], dict[str, float]]:
        """Flat batch ``[T * N, ...]`` (``base.flatten``: forward_inputs, actions, logprobs, values, executed,
        advantages, returns, versions) and metrics of the batch: GAE over the concatenated trajectories."""
        traj = Trajectory.concat(trajectories)
        rewards = traj.rewards.sum(-1) * self.cfg.reward_scale  # the value head predicts scaled returns
        advantages, returns = compute_gae(rewards, traj.values, traj.dones, traj.terminated,
                                          traj.final_values, traj.next_values, self.cfg.gamma, self.cfg.gae_lambda,
                                          self.cfg.bootstraps_terminations(), self.cfg.finite_horizon_gae)
        return flatten(traj, advantages, returns), {}

    def loss(self, logprobs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor, mb: dict[str, Any],
             mask: torch.Tensor, warmup: bool, averages: Averages | None = None) -> LossOutput:
        """The minibatch loss; ``warmup`` trains the value head alone (critic warm-up). With ``averages``, ``mb`` is
        one part of a larger minibatch and every mean is taken through it (see ``Averages``)."""
        c = self.cfg
        adv = mb["advantages"]
        if c.normalize_advantages:  # over the whole minibatch, also when it is computed in parts
            adv = normalize_advantages(adv) if averages is None else averages.normalize(adv)
        out = ppo_loss(logprobs, mb["logprobs"], adv, values, mb["values"], mb["returns"], entropy,
                       clip_coef=c.clip_coef, vf_coef=c.vf_coef, ent_coef=c.ent_coef, clip_vloss=c.clip_vloss,
                       mask=mask, behaviour_logprobs=mb.get("behaviour_logprobs"), averages=averages)
        # Critic warm-up: the value head learns the (SFT) policy's returns before the policy moves.
        return LossOutput(c.vf_coef * out.stats["value_loss"] if warmup else out.loss, out.stats)

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "generator" in state:  # the minibatch order goes on where it stopped
            self.generator.set_state(state["generator"])

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> dict[str, float]:
        """One update (``update_epochs`` passes of minibatches) on this rank's ``trajectories``; returns metrics of
        the whole batch (every rank's)."""
        c, ranks = self.cfg, ctx.ranks
        batch, batch_metrics = self.prepare(trajectories)
        batch_metrics = self._over_ranks(batch_metrics, ranks)
        staleness = (ctx.version - batch["versions"]).float()  # per chunk step, in updates (async: <= max_staleness)
        if ranks.sum(staleness.max().reshape(1)) > 0:  # decoupled PPO: clip around the weights the update starts from
            fresh = expand_rows(staleness == 0, batch["logprobs"])  # acted with these weights: keep their log-probs
            proximal = torch.where(fresh, batch["logprobs"], self._proximal_logprobs(batch, ctx))
            batch["behaviour_logprobs"], batch["logprobs"] = batch["logprobs"], proximal
        size = batch["values"].shape[0]
        warmup = iteration <= c.warmup_iterations()
        stats: dict[str, list[float]] = {}
        skipped = 0
        for epoch in range(c.update_epochs):
            perm = torch.randperm(size, generator=self.generator)
            for k, mb in enumerate(perm.chunk(c.num_minibatches)):  # several ranks: equal parts (config check)
                step_lr = learning_rate(c, ctx.lr, ctx.total_iterations, iteration, epoch * c.num_minibatches + k)
                ctx.optimizer.param_groups[0]["lr"] = step_lr
                step = self._step(take(batch, mb), warmup, ctx, f"iteration {iteration}, epoch {epoch}, minibatch {k}")
                if step is None:
                    skipped += 1
                    continue
                for key, value in step.items():
                    stats.setdefault(key, []).append(value)
            if c.target_kl is not None and stats and np.mean(stats["approx_kl"][-c.num_minibatches:]) > c.target_kl:
                break
        metrics = {f"train/{k}": float(np.mean(v)) for k, v in stats.items()} | batch_metrics
        metrics["train/lr"] = ctx.optimizer.param_groups[0]["lr"]
        metrics["train/critic_warmup"] = float(warmup)
        metrics["train/skipped_minibatches"] = float(skipped)
        staleness = ranks.gather(staleness)  # the whole batch's, on every rank
        metrics["train/staleness_mean"] = float(staleness.mean())
        metrics["train/staleness_max"] = float(staleness.max())
        if self.uses_values:
            metrics["train/explained_variance"] = explained_variance(ranks.gather(batch["values"]),
                                                                     ranks.gather(batch["returns"]))
        return metrics

    def _step(self, mb: dict[str, Any], warmup: bool, ctx: UpdateContext, where: str) -> dict[str, float] | None:
        """One gradient step on this rank's share of a minibatch, in ``ctx.micro_batches`` parts; None if it was
        skipped for a non-finite loss or gradient (on every rank alike)."""
        c, ranks = self.cfg, ctx.ranks
        rows = torch.arange(mb["values"].shape[0])
        parts = [take(mb, r) for r in rows.chunk(ctx.micro_batches)] if ctx.micro_batches > 1 else [mb]
        # Split in parts (micro-batches, ranks), every mean is the part's share of the whole minibatch's.
        averages = None if len(parts) == 1 and ranks.size == 1 else \
            Averages(mb["executed"], mb["advantages"], ranks.sum)
        ctx.optimizer.zero_grad()
        stats: dict[str, float] = {}
        for part in parts:
            part = to_device(part, ctx.device)
            logprobs, entropy, values = ctx.policy.evaluate(part["forward_inputs"], part["actions"])
            out = self.loss(logprobs, entropy, values, part, expand_mask(part["executed"], logprobs), warmup, averages)
            part_stats = ranks.sum_stats({k: float(v.detach()) for k, v in out.stats.items()}
                                         | {"loss": float(out.loss.detach())})
            stats = {k: stats.get(k, 0.0) + v for k, v in part_stats.items()}
            if non_finite_terms(stats):
                break  # every rank sees the same sums: all stop here
            ranks.backward(out.loss)
        if not non_finite_terms(stats):
            if warmup:  # the value loss also reaches shared layers (a VLA backbone, a CNN encoder): keep them still
                for p in ctx.params:
                    if id(p) not in ctx.value_head:
                        p.grad = None
            ranks.reduce_gradients(ctx.params)
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(ctx.params, c.max_grad_norm))
        bad = non_finite_terms(stats)
        if bad:
            ctx.optimizer.zero_grad()  # nothing of this minibatch reaches the weights
            if c.skip_nonfinite_updates:
                return None
            values_text = ", ".join(f"{name}={stats[name]}" for name in bad)
            raise NonFiniteUpdateError(
                f"update at {where}: non-finite {values_text}; the minibatch was not applied and these weights are "
                f"neither published nor checkpointed (algorithm.skip_nonfinite_updates=true skips such minibatches "
                f"and counts them in train/skipped_minibatches)")
        ctx.optimizer.step()
        ctx.after_step()
        return stats

    @torch.no_grad()
    def _proximal_logprobs(self, batch: dict[str, Any], ctx: UpdateContext) -> torch.Tensor:
        """The current weights' log-probs of the batch's actions (before any step of this update)."""
        parts = []
        for rows in torch.arange(batch["values"].shape[0]).chunk(self.cfg.num_minibatches):
            mb = to_device(take(batch, rows), ctx.device)
            parts.append(ctx.policy.evaluate(mb["forward_inputs"], mb["actions"])[0].float().cpu())
        return torch.cat(parts).to(batch["logprobs"].dtype)

    def _over_ranks(self, metrics: dict[str, float], ranks: RankGroup) -> dict[str, float]:
        """``prepare``'s metrics of the whole batch: counts (``summed_metrics``) summed over the ranks, the rest
        averaged (each rank holds an equal share of the batch)."""
        if ranks.size == 1:
            return metrics
        total = ranks.sum_stats(metrics)
        return {k: v if k in self.summed_metrics else v / ranks.size for k, v in total.items()}

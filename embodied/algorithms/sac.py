"""Soft actor-critic over action chunks (``algorithm.name: sac``): the maths as pure functions of tensors,
and the learner that steps the policy, its Q-ensemble and the entropy temperature with them.

A chunk ``[C, A]`` is SAC's action. Its reward is the discounted sum over the sub-steps the env really
executed, with ``algorithm.gamma`` per *sub-step*, so the bootstrap is discounted by
``gamma ** executed`` (``chunk_reward``). ``final_obs`` bootstraps a truncation; a termination does not
(the auto-reset contract, as GAE uses it). With ``algorithm.n_step`` > 1 replay stores n-step returns over
chunks (``n_step_returns``): n consecutive chunk rewards of one env, the window stopping where its episode ends
(a termination does not bootstrap, a truncation bootstraps from its ``final_obs``) or its rollout epoch ends.

Critics (REDQ / RLPD): ``algorithm.num_critics`` Q-functions; the TD target takes the min over a random
subset of ``algorithm.critic_subset`` of the target critics (``subset_min``); the policy maximises the
ensemble's mean, or its min (``algorithm.policy_q``). The policy's loss is one overridable method,
``SACLearner.policy_objective``: a variant of SAC is a subclass that overrides it (AWAC, ``algorithm.name: awac``,
``embodied.algorithms.awac``), with a config class of its own. With demonstrations, ``algorithm.bc_weight`` adds
TD3+BC's term (``bc_term``) to whichever objective (``SACLearner.with_demo_term``). ("Actor" is this project's
training worker; SAC's actor is called the policy here.)
Target critics follow the online ones by polyak averaging (``polyak_update``, ``tau``).
The temperature alpha is tuned so the policy's entropy stays near ``target_entropy`` (default ``-C * A``).

Pixels (DrQ, RLPD): the policy's ``feature_encoder`` (a CNN's image encoder) is trained by the critics' loss
alone; the policy's loss sees its features detached, and the TD target reads a polyak copy of it beside the target
critics. Every batch's images, ``obs`` and ``next_obs`` independently, are shifted at random by up to
``algorithm.image_shift`` pixels (``embodied.algorithms.augment.random_shift``).

    reward, discount = chunk_reward(rewards, executed, gamma)            # [B], [B]
    reward, discount, bootstrap, last = n_step_returns(reward, discount, terminated, following, n)  # replay's rows
    target = td_target(reward, discount, bootstrap, subset_min(q_next, 2, g), next_logprob, alpha)
    loss = critic_loss(q, target) + policy_loss(q_pi, logprob, alpha) + temperature_loss(log_alpha, logprob, -C*A)
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from embodied.algorithms.augment import random_shift
from embodied.algorithms.base import LearnerRanks, LearnerSpec
from embodied.algorithms.sac_networks import build_critics
from embodied.algorithms.transitions import ReplaySample, chunk_reward, n_step_returns
from embodied.core.types import MAIN_IMAGES, WRIST_IMAGES, Trajectory

if TYPE_CHECKING:
    from embodied.algorithms.sac_config import SACConfig
    from embodied.policy.base import Policy

# Replay's rows and their maths are every off-policy learner's (``transitions``); named here too, as SAC's.
__all__ = ["ReplaySample", "SACLearner", "chunk_reward", "n_step_returns"]


# -- the maths ------------------------------------------------------------------------------------


def td_target(reward: torch.Tensor, discount: torch.Tensor, bootstrap: torch.Tensor, next_q: torch.Tensor,
              next_logprob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """The soft TD target ``r + bootstrap * discount * (Q'(s', a') - alpha * log pi(a'|s'))`` [B].

    ``bootstrap`` is False where the episode terminated inside the chunk (a truncation bootstraps from
    ``final_obs``, which is then ``s'``); every argument is [B] but ``alpha``, a scalar.
    """
    soft_value = next_q - alpha * next_logprob
    return reward + bootstrap.to(reward.dtype) * discount * soft_value


def subset_min(q: torch.Tensor, subset: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The min over ``subset`` critics drawn at random (without replacement) from the ensemble ``q`` [E, B] -> [B]
    (REDQ); ``subset == E`` is clipped double-Q over all of them."""
    chosen = torch.randperm(q.shape[0], generator=generator)[:subset]
    return q[chosen].min(dim=0).values


def critic_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over the ensemble of each critic's mean squared TD error; ``q`` [E, B], ``target`` [B] (no gradient)."""
    return ((q - target.detach()) ** 2).mean(dim=1).sum()


def ensemble_q(q: torch.Tensor, reduce: Literal["mean", "min"] = "mean") -> torch.Tensor:
    """The ensemble's Q [B] of ``q`` [E, B]: its mean (``"mean"``, REDQ/RLPD) or its min (``"min"``, SAC-N)."""
    return q.mean(dim=0) if reduce == "mean" else q.min(dim=0).values


def policy_loss(q: torch.Tensor, logprob: torch.Tensor, alpha: torch.Tensor | float,
               reduce: Literal["mean", "min"] = "mean") -> torch.Tensor:
    """``mean(alpha * log pi(a|s) - Q(s, a))`` for actions ``a ~ pi``, ``Q`` the ensemble's (``ensemble_q``):
    ``q`` [E, B], ``logprob`` [B]."""
    return (alpha * logprob - ensemble_q(q, reduce)).mean()


def bc_term(mode_error: torch.Tensor, q: torch.Tensor, weight: float) -> torch.Tensor:
    """TD3+BC's behaviour-cloning term, ``weight * mean|Q| * mean(mode_error)``: ``mode_error`` [D] on the
    demonstration rows, ``q`` [E, B] the critics' values of the policy's actions (no gradient through the scale), so
    ``weight`` means the same whatever the returns' scale (TD3+BC's alpha is ``1 / weight``)."""
    return weight * q.detach().abs().mean() * mode_error.mean()


def temperature_loss(log_alpha: torch.Tensor, logprob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """Alpha rises while the entropy ``-log pi`` is below ``target_entropy`` and falls above it (CleanRL's form)."""
    return (-log_alpha.exp() * (logprob.detach() + target_entropy)).mean()


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online``, in place, tensor by tensor."""
    for t, o in zip(target, online, strict=True):
        t.lerp_(o, tau)


@torch.no_grad()
def copy_buffers(target: torch.nn.Module, online: torch.nn.Module) -> None:
    """A target network's buffers (input statistics, not learned) follow the online network's as they are: Polyak
    averaging is for the weights, and a target that standardized its inputs by older statistics would score
    different inputs than the critics it bootstraps."""
    for t, o in zip(target.buffers(), online.buffers(), strict=True):
        t.copy_(o)


def rank_backward(loss: torch.Tensor, params: list[torch.nn.Parameter], ranks: LearnerRanks | None) -> None:
    """``loss``'s backward as one share of the ranks' whole batch (divided by their number), then its gradients
    over ``params`` summed over the ranks: the ranks step as one would on the whole batch."""
    (loss * (1.0 / ranks.size if ranks is not None else 1.0)).backward()
    if ranks is not None:
        ranks.reduce_gradients(params)


IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)  # the inputs ``algorithm.image_shift`` shifts, where a policy reads them


# -- the learner ------------------------------------------------------------------------------------


@dataclass
class PolicyBatch:
    """What the policy's objective (``SACLearner.policy_objective``) is computed from, for one replay batch [B rows]."""

    features: torch.Tensor  # [B, ...] the rows' features, detached: only the critics' loss trains the encoder
    actions: torch.Tensor  # [B, ...] replay's action column (the executed chunks, or what stands for them)
    q: torch.Tensor  # [E, B] the critics' values of replay's actions, before this step's critic update (no gradient)
    pi_q: torch.Tensor  # [E, B] the critics' values of the policy's sampled actions (their gradient reaches the policy)
    logprob: torch.Tensor  # [B] the sampled actions' log-probabilities
    alpha: torch.Tensor  # the entropy temperature (no gradient)
    demo_rows: int  # the first rows are demonstrations (``demo_replay.mixed_sample`` put them there)


class SACLearner:
    """The critics, their targets, the temperature and the three optimizers around a ``QFunctionPolicy``: the
    ``OffPolicyLearner`` of ``algorithm.name: sac`` and ``dsrl`` (``SACConfig.algorithm_class``), and the base of
    SAC's variants, which override ``policy_objective`` (``awac.AWACLearner``).

    The policy (SAC's actor: what rollouts act with and weight sync sends) is the worker's; the critics are built
    here from its features and action chunks (``embodied.algorithms.sac_networks.build_critics``) and live here, so
    they never travel to rollout workers.
    """

    name: ClassVar[str] = "sac"  # checkpoint keys and metric prefix (a variant: its own)

    def __init__(self, policy: Policy, cfg: SACConfig, spec: LearnerSpec) -> None:
        self.policy, self.cfg = policy, cfg
        lr, action_size, seed = spec.lr, spec.action_size, spec.seed
        # The critics are the algorithm's, shaped from the policy's features and chunks (``sac_networks``).
        self.critics = self.new_critics(policy, cfg)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        # The policy's feature encoder (DrQ/RLPD): trained by the critics' loss alone, seen detached by the policy's;
        # the TD target reads a polyak copy of it, as it reads the target critics (none of it for states).
        self.encoder: torch.nn.Module = policy.feature_encoder  # type: ignore[attr-defined]
        self.target_encoder = copy.deepcopy(self.encoder).requires_grad_(False)
        encoder_params = [p for p in self.encoder.parameters() if p.requires_grad]
        shared = {id(p) for p in encoder_params}
        self.log_alpha = torch.tensor(float(cfg.init_alpha)).log().requires_grad_(True)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -float(action_size)
        self.policy_params = [p for p in policy.parameters() if p.requires_grad and id(p) not in shared]
        self.policy_optimizer = torch.optim.Adam(self.policy_params, lr=lr)
        self.critic_params = [*self.critics.parameters(), *encoder_params]  # the encoder trains with the critics
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.critic_lr if cfg.critic_lr else lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)
        # The augmentation's shifts, the critic subsets and the policy's noise are drawn from it (exact resume).
        self.generator = torch.Generator().manual_seed(seed)
        self.ranks: LearnerRanks | None = None  # several actor ranks (``join``): every loss's gradients summed over them

    def new_critics(self, policy: Policy, cfg: SACConfig) -> torch.nn.Module:
        """The critic ensemble (a ``QEnsemble``: ``q_values(features, actions) -> [E, B]``) over ``policy``'s features
        and chunks: SAC's MLPs (``sac_networks.build_critics``). What a variant with other critics overrides."""
        return build_critics(policy, cfg.num_critics, cfg.critic_hidden_sizes, cfg.critic_layernorm)

    def rank_modules(self) -> list[torch.nn.Module]:
        """The critics, their targets and the target encoder: made equal to rank 0's when the ranks join (the
        temperature is a tensor the ranks' identical updates keep equal from its equal start)."""
        return [self.critics, self.target_critics, self.target_encoder]

    def join(self, ranks: LearnerRanks) -> None:
        """One of several actor ranks: ``rank_modules`` start as rank 0's; every update sums over ``ranks``."""
        for module in self.rank_modules():
            ranks.prepare(module)
        self.ranks = ranks

    def trains_policy(self, batch: ReplaySample) -> bool:
        """False in the critic warm-up (``algorithm.critic_warmup_iterations`` after an SFT start): the critics
        learn the policy's values before the policy follows them."""
        return batch.iteration > self.cfg.warmup_iterations()

    def replay_actions(self, trajectory: Trajectory) -> torch.Tensor:
        """What the critics score [T, N, ...]: the executed chunks (a variant may keep what stands for them: DSRL's
        initial noise)."""
        return trajectory.actions

    def demo_actions(self, actions: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        """Demonstrated chunks [N, C, A] as replay holds them: as they are."""
        return actions

    def inputs(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The policy's forward inputs of a replay batch, its images shifted at random (``algorithm.image_shift``)."""
        inputs = self.policy.forward_inputs(obs)
        for key in IMAGE_KEYS:
            if key in inputs and self.cfg.image_shift:
                inputs[key] = random_shift(inputs[key], self.cfg.image_shift, self.generator)
        return inputs

    def update(self, batch: ReplaySample) -> dict[str, float]:
        """One gradient step of the critics (and the encoder), then the policy and alpha (CleanRL's order); the
        logged stats (this batch's). ``obs`` and ``next_obs`` are augmented independently, as DrQ does. In the
        critic warm-up (``trains_policy``) the policy and alpha stay; their losses are still reported. The policy's
        loss is ``policy_objective``'s, given the batch's first ``demo_rows`` rows are demonstrations.

        With several actor ranks (``join``), each holding an equal share of the whole batch, every loss is
        this share's mean divided by the number of ranks and the gradients are summed over the ranks before
        each optimizer step: the ranks step as one would on the whole batch, and stay identical.
        """
        c, policy, ranks, train_policy = self.cfg, self.policy, self.ranks, self.trains_policy(batch)

        alpha = self.log_alpha.exp().detach()
        copy_buffers(self.target_encoder, self.encoder)
        inputs, next_inputs = self.inputs(batch.obs), self.inputs(batch.next_obs)
        features = self.encoder(inputs)
        with torch.no_grad():
            next_actions, next_logprob = policy.sample_with_logprob(  # type: ignore[attr-defined]
                self.encoder(next_inputs), self.generator)
            next_q = subset_min(self.target_critics.q_values(self.target_encoder(next_inputs), next_actions),
                                c.critic_subset, self.generator)
            target = td_target(batch.reward, batch.discount, batch.bootstrap, next_q, next_logprob, alpha)
        q = self.critics.q_values(features, batch.actions)
        q_loss = critic_loss(q, target)
        self.critic_optimizer.zero_grad()
        rank_backward(q_loss, self.critic_params, ranks)
        self.critic_optimizer.step()

        # The policy's loss sees the features detached (stop-gradient: only the critics train the encoder). They
        # were computed before the critic step, so they lag it by one step: DrQ recomputes them, one more encoder pass.
        detached = features.detach()
        with torch.set_grad_enabled(train_policy):
            actions, logprob = policy.sample_with_logprob(detached, self.generator)  # type: ignore[attr-defined]
            self.critics.requires_grad_(False)  # the policy's loss moves the policy only
            pi_q = self.critics.q_values(detached, actions)
            pi_loss, parts = self.policy_objective(PolicyBatch(detached, batch.actions, q.detach(), pi_q, logprob,
                                                               alpha, batch.demo_rows))
            self.critics.requires_grad_(True)
        if train_policy:
            self.step_policy(pi_loss, logprob, ranks)
        polyak_update([*self.target_critics.parameters(), *self.target_encoder.parameters()],
                      [*self.critics.parameters(), *self.encoder.parameters()], c.tau)
        stats = {"q_loss": q_loss, "policy_loss": pi_loss, "alpha": alpha, "entropy": -logprob.detach().mean(),
                 "q_mean": q.detach().mean(), "target_mean": target.mean(), **parts}
        return {f"{self.name}/{key}": value.item() for key, value in stats.items()}

    def step_policy(self, pi_loss: torch.Tensor, logprob: torch.Tensor, ranks: LearnerRanks | None) -> None:
        """One optimizer step of the policy on ``pi_loss``, then of the temperature towards ``target_entropy``."""
        self.policy_optimizer.zero_grad()
        rank_backward(pi_loss, self.policy_params, ranks)
        self.policy_optimizer.step()
        alpha_loss = temperature_loss(self.log_alpha, logprob, self.target_entropy)
        self.alpha_optimizer.zero_grad()
        rank_backward(alpha_loss, [self.log_alpha], ranks)
        self.alpha_optimizer.step()

    def policy_objective(self, b: PolicyBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy's loss on a batch and its logged parts (scalars, each logged as ``<name>/<part>``): SAC's
        (``policy_loss``: the entropy-regularised value of its sampled actions, ``algorithm.policy_q`` over the
        ensemble), with TD3+BC's term on the demonstration rows (``with_demo_term``). What a variant of SAC
        overrides."""
        return self.with_demo_term(policy_loss(b.pi_q, b.logprob, b.alpha, self.cfg.policy_q), b)

    def with_demo_term(self, loss: torch.Tensor, b: PolicyBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``loss`` plus TD3+BC's term (``bc_term``, ``algorithm.bc_weight``) on the batch's demonstration rows, and
        ``{"bc_loss": term}`` (0 with no weight or no demonstration rows). An option of every objective of the SAC
        family trained with demonstrations: it regularises whatever the policy's own loss is, toward the demos."""
        if not (self.cfg.bc_weight > 0 and b.demo_rows > 0):
            return loss, {"bc_loss": torch.zeros(())}
        error = self.policy.mode_error(b.features[:b.demo_rows], b.actions[:b.demo_rows])  # type: ignore[attr-defined]
        bc = bc_term(error, b.pi_q, self.cfg.bc_weight)
        return loss + bc, {"bc_loss": bc}

    def state_dict(self) -> dict[str, Any]:
        """What exact resume needs of the learner (the policy's weights and optimizer travel as the worker's)."""
        return {"critics": self.critics.state_dict(), "target_critics": self.target_critics.state_dict(),
                "target_encoder": self.target_encoder.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "policy_optimizer": self.policy_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "alpha_optimizer": self.alpha_optimizer.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critics.load_state_dict(state["critics"])
        self.target_critics.load_state_dict(state["target_critics"])
        self.target_encoder.load_state_dict(state["target_encoder"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.generator.set_state(state["generator"])

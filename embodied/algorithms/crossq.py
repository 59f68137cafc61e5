"""CrossQ (Bhatt et al., ICLR 2024; ``algorithm.name: crossq``): SAC without target networks. The critics are
batch-normalised, and the current rows (replay's actions) and the next rows (the policy's sampled next actions) go
through them in one pass, so the normalisation sees both distributions; the TD target is the next rows' part of that
pass, with no gradient. The policy and the temperature are updated every ``policy_delay`` critic steps, against the
critics in eval mode (their running statistics), and every optimizer is Adam with ``beta1 = adam_beta1``.

    q_all = critics([s; s'], [a; a' ~ pi(s')])                 # train mode: one batch norm over both halves
    q, q_next = q_all[:, :B], q_all[:, B:]
    target = r + bootstrap * discount * (min(q_next) - alpha * log pi(a'|s'))     # no gradient
    critic_loss = sum over critics of mean (q - target)^2

Everything else (replay, pacing, demonstrations, the temperature, the tanh-Gaussian policy) is SAC's
(``embodied.algorithms.sac``); its checkpoints and metrics are ``crossq``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from embodied.algorithms.base import LearnerSpec
from embodied.algorithms.sac import (PolicyBatch, SACLearner, critic_loss, rank_backward, subset_min,
                                     td_target)
from embodied.algorithms.sac_networks import critic_sizes
from embodied.algorithms.transitions import ReplaySample
from embodied.policy.ensemble import EnsembleLinear

if TYPE_CHECKING:
    from embodied.algorithms.crossq_config import CrossQConfig
    from embodied.policy.base import Policy


class EnsembleBatchNorm(nn.Module):
    """Batch normalisation of [E, B, W] over the batch, each critic with its own statistics and affine [E, 1, W]."""

    def __init__(self, ensemble: int, width: int, momentum: float, eps: float) -> None:
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(ensemble, 1, width))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, width))
        self.register_buffer("running_mean", torch.zeros(ensemble, 1, width))
        self.register_buffer("running_var", torch.ones(ensemble, 1, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean, var = h.mean(1, keepdim=True), h.var(1, unbiased=False, keepdim=True)
            with torch.no_grad():
                n = h.shape[1]
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var * n / max(n - 1, 1), self.momentum)  # unbiased, as torch's BatchNorm
        else:
            mean, var = self.running_mean, self.running_var
        return (h - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class BatchNormQEnsemble(nn.Module):
    """``num_critics`` critics Q(s, a) over ``sizes`` [in, hidden..., 1]: batch norm on the input and after every
    hidden layer's ReLU (CrossQ's), batched over the ensemble (a ``QEnsemble``)."""

    def __init__(self, num_critics: int, sizes: list[int], momentum: float, eps: float) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.norms = nn.ModuleList(EnsembleBatchNorm(num_critics, w, momentum, eps) for w in sizes[:-1])

    def q_values(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of every critic: ``features`` [B, F], ``actions`` [B, C, A] -> [E, B]."""
        x = torch.cat([features, actions.reshape(actions.shape[0], -1)], dim=-1)
        h = self.norms[0](x.unsqueeze(0).expand(self.num_critics, *x.shape))
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.norms[i + 1](F.relu(h))
        return h.squeeze(-1)

    def forward(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.q_values(features, actions)


class CrossQLearner(SACLearner):
    """SAC's learner with CrossQ's critics and step (see the module docstring); no target networks."""

    name: ClassVar[str] = "crossq"
    cfg: CrossQConfig  # type: ignore[assignment]

    def __init__(self, policy: Policy, cfg: CrossQConfig, spec: LearnerSpec) -> None:
        super().__init__(policy, cfg, spec)
        del self.target_critics, self.target_encoder  # SAC's targets: CrossQ has none
        betas = (cfg.adam_beta1, 0.999)
        self.policy_optimizer = torch.optim.Adam(self.policy_params, lr=spec.lr, betas=betas)
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.critic_lr or spec.lr, betas=betas)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=spec.lr, betas=betas)
        self.critic_steps = 0  # the policy steps at every policy_delay-th

    def new_critics(self, policy: Policy, cfg: CrossQConfig) -> nn.Module:  # type: ignore[override]
        return BatchNormQEnsemble(cfg.num_critics, critic_sizes(policy, cfg.critic_hidden_sizes), cfg.bn_momentum,
                                  cfg.bn_eps)

    def rank_modules(self) -> list[nn.Module]:
        """The critics (their running statistics too: buffers travel with the module)."""
        return [self.critics]

    def update(self, batch: ReplaySample) -> dict[str, float]:
        """One critic step on the joint pass; every ``policy_delay``-th also a policy and temperature step (never
        in the critic warm-up). Several ranks: as ``SACLearner.update``."""
        c, policy, ranks, train_policy = self.cfg, self.policy, self.ranks, self.trains_policy(batch)

        alpha = self.log_alpha.exp().detach()
        features = self.encoder(self.inputs(batch.obs))
        with torch.no_grad():
            next_features = self.encoder(self.inputs(batch.next_obs))
            next_actions, next_logprob = policy.sample_with_logprob(next_features, self.generator)  # type: ignore
        rows = features.shape[0]
        self.critics.train()
        q_all = self.critics.q_values(torch.cat([features, next_features]), torch.cat([batch.actions, next_actions]))
        q, next_q = q_all[:, :rows], q_all[:, rows:].detach()
        target = td_target(batch.reward, batch.discount, batch.bootstrap,
                           subset_min(next_q, c.critic_subset, self.generator), next_logprob, alpha)
        q_loss = critic_loss(q, target)
        self.critic_optimizer.zero_grad()
        rank_backward(q_loss, self.critic_params, ranks)
        self.critic_optimizer.step()
        self.critic_steps += 1

        stats: dict[str, Any] = {"q_loss": q_loss, "alpha": alpha, "q_mean": q.detach().mean(),
                                 "target_mean": target.mean()}
        if train_policy and self.critic_steps % c.policy_delay == 0:
            detached = features.detach()
            actions, logprob = policy.sample_with_logprob(detached, self.generator)  # type: ignore[attr-defined]
            self.critics.eval()  # the policy is scored by the running statistics, not this batch's
            self.critics.requires_grad_(False)
            pi_q = self.critics.q_values(detached, actions)
            self.critics.requires_grad_(True)
            self.critics.train()
            pi_loss, parts = self.policy_objective(PolicyBatch(detached, batch.actions, q.detach(), pi_q, logprob,
                                                               alpha, batch.demo_rows))
            self.step_policy(pi_loss, logprob, ranks)
            stats |= {"policy_loss": pi_loss, "entropy": -logprob.detach().mean(), **parts}
        return {f"{self.name}/{key}": value.item() for key, value in stats.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"critics": self.critics.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "policy_optimizer": self.policy_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "alpha_optimizer": self.alpha_optimizer.state_dict(), "generator": self.generator.get_state(),
                "critic_steps": self.critic_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critics.load_state_dict(state["critics"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.generator.set_state(state["generator"])
        self.critic_steps = int(state["critic_steps"])

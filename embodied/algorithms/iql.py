"""IQL, implicit Q-learning (Kostrikov et al., ICLR 2022; ``algorithm.name: iql``): offline RL that never queries
the critics at actions outside the data, then fine-tuned online on the same loss. Three losses a step, on a replay
batch of chunks (``a`` replay's own chunk, ``Q'`` the target critics, their min over ``critic_subset``):

    V:  expectile_loss(Q'(s, a) - V(s), expectile)            # V(s) -> an upper expectile of Q over the data
    Q:  sum over critics of mean (Q(s, a) - (r + bootstrap * discount * V(s')))^2
    pi: advantage_weighted_loss(mode_error(s, a), Q'(s, a) - V(s), awr_temperature)   # AWAC's regression form

SAC's learner provides the critics, their targets and polyak rate, the policy's encoder (trained by the critics'
loss), replay, demonstrations and checkpoints; the temperature is not used. Metrics: ``iql/...``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from embodied.algorithms.awac import advantage_weighted_loss
from embodied.algorithms.base import LearnerSpec
from embodied.algorithms.sac import SACLearner, critic_loss, polyak_update, rank_backward, subset_min
from embodied.algorithms.sac_networks import critic_source
from embodied.algorithms.transitions import ReplaySample

if TYPE_CHECKING:
    from embodied.algorithms.iql_config import IQLConfig
    from embodied.policy.base import Policy


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``mean(|expectile - 1(diff < 0)| * diff^2)`` for ``diff = Q - V`` [B]: the asymmetric square whose minimiser
    is the ``expectile`` of Q (0.5: its mean)."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


def value_network(feature_size: int, hidden_sizes: list[int]) -> nn.Sequential:
    """V(s): an MLP from the policy's features to one number."""
    sizes = [feature_size, *hidden_sizes]
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], 1))


class IQLLearner(SACLearner):
    """SAC's critics and targets with IQL's value, TD target and policy loss (see the module docstring)."""

    name: ClassVar[str] = "iql"
    cfg: IQLConfig  # type: ignore[assignment]

    def __init__(self, policy: Policy, cfg: IQLConfig, spec: LearnerSpec) -> None:
        super().__init__(policy, cfg, spec)
        self.value = value_network(critic_source(policy).feature_size, cfg.value_hidden_sizes)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=cfg.critic_lr or spec.lr)

    def rank_modules(self) -> list[nn.Module]:
        return [*super().rank_modules(), self.value]

    def update(self, batch: ReplaySample) -> dict[str, float]:
        """V, then Q, then (not in the critic warm-up) the policy, then the targets' polyak step. Several ranks: as
        ``SACLearner.update``."""
        c, policy, ranks, train_policy = self.cfg, self.policy, self.ranks, self.trains_policy(batch)

        features = self.encoder(self.inputs(batch.obs))
        detached = features.detach()
        with torch.no_grad():
            target_q = subset_min(self.target_critics.q_values(self.target_encoder(self.inputs(batch.obs)),
                                                               batch.actions), c.critic_subset, self.generator)
            next_v = self.value(self.target_encoder(self.inputs(batch.next_obs))).squeeze(-1)
            target = batch.reward + batch.bootstrap.to(batch.reward.dtype) * batch.discount * next_v
        v = self.value(detached).squeeze(-1)
        v_loss = expectile_loss(target_q - v, c.expectile)
        self.value_optimizer.zero_grad()
        rank_backward(v_loss, list(self.value.parameters()), ranks)
        self.value_optimizer.step()

        q = self.critics.q_values(features, batch.actions)
        q_loss = critic_loss(q, target)
        self.critic_optimizer.zero_grad()
        rank_backward(q_loss, self.critic_params, ranks)
        self.critic_optimizer.step()

        advantage = target_q - v.detach()
        with torch.set_grad_enabled(train_policy):
            error = policy.mode_error(detached, batch.actions)  # type: ignore[attr-defined]
            pi_loss = advantage_weighted_loss(error, advantage, c.awr_temperature, c.awr_max_weight)
        if train_policy:
            self.policy_optimizer.zero_grad()
            rank_backward(pi_loss, self.policy_params, ranks)
            self.policy_optimizer.step()
        polyak_update([*self.target_critics.parameters(), *self.target_encoder.parameters()],
                      [*self.critics.parameters(), *self.encoder.parameters()], c.tau)
        stats = {"q_loss": q_loss, "v_loss": v_loss, "policy_loss": pi_loss, "q_mean": q.detach().mean(),
                 "v_mean": v.detach().mean(), "advantage_mean": advantage.mean(), "target_mean": target.mean()}
        return {f"{self.name}/{key}": value.item() for key, value in stats.items()}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "value": self.value.state_dict(),
                "value_optimizer": self.value_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.value.load_state_dict(state["value"])
        self.value_optimizer.load_state_dict(state["value_optimizer"])

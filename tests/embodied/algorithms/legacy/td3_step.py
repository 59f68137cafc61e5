# docs/examples/my_algo/td3.py as the guide showed it before OffPolicyLearner.update (kept: plug-ins written to it run).
"""TD3 (Fujimoto et al. 2018) as an ``OffPolicyLearner``: twin critics over (features, chunk), a TD target from the
target critics at the target policy's smoothed greedy chunk, the actor (the policy's greedy chunk) every
``policy_delay`` steps. Configured by ``TD3Config``."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
from torch import nn

from embodied.api import LearnerSpec, ReplaySample, Trajectory
from my_algo.td3_config import TD3Config


class TD3StepConfig(TD3Config):
    """The guide's TD3 config, naming the learner of before (this file's)."""

    algorithm_class: ClassVar[str] = "tests.embodied.algorithms.legacy.td3_step:TD3"


def critic(n_in: int, hidden: tuple[int, ...]) -> nn.Sequential:
    sizes, layers = [n_in, *hidden], []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], 1))


class TD3:
    """What the off-policy actor worker stepped on replay batches (``embodied.algorithms.base.OffPolicyLearner``)."""

    name: ClassVar[str] = "td3"  # checkpoint keys (td3, td3_counters, td3_generator) and metric prefix

    def __init__(self, policy: Any, cfg: TD3Config, spec: LearnerSpec) -> None:
        self.policy, self.cfg = policy, cfg
        self.encoder = policy.feature_encoder  # states: no weights; a CNN: trained by the critics' loss
        n_in = policy.feature_size + spec.action_size
        self.critics = nn.ModuleList(critic(n_in, cfg.critic_hidden_sizes) for _ in range(2))
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.target_policy = copy.deepcopy(policy).requires_grad_(False)
        # The smoothing noise in the env's units: a fraction of each action's half-range (spec.action_space).
        space = spec.action_space
        self.half_range = torch.as_tensor((space.high - space.low) / 2)  # [C, A]
        self.low, self.high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        shared = {id(p) for p in self.encoder.parameters()}
        self.policy_params = [p for p in policy.parameters() if p.requires_grad and id(p) not in shared]
        self.policy_optimizer = torch.optim.Adam(self.policy_params, lr=spec.lr)
        self.critic_params = [*self.critics.parameters(), *self.encoder.parameters()]
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=spec.lr)
        self.generator = torch.Generator().manual_seed(spec.seed)  # the smoothing noise: saved, so resume is exact
        self.steps = 0

    def rank_modules(self) -> list[nn.Module]:
        return [self.critics, self.target_critics, self.target_policy]

    def replay_actions(self, trajectory: Trajectory) -> torch.Tensor:
        return trajectory.actions  # the executed chunks [T, N, C, A]

    def demo_actions(self, actions: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        return actions

    def q(self, critics: nn.ModuleList, features: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([features, actions.flatten(1)], dim=-1)
        return [c(x).squeeze(-1) for c in critics]

    def step(self, batch: ReplaySample, ranks: Any = None, train_policy: bool = True,
             demo_rows: int = 0) -> dict[str, float]:
        c = self.cfg
        features = self.encoder(self.policy.forward_inputs(batch.obs))
        with torch.no_grad():
            next_features = self.encoder(self.policy.forward_inputs(batch.next_obs))
            noise = torch.randn(batch.actions.shape, generator=self.generator) * c.policy_noise
            noise = noise.clamp(-c.noise_clip, c.noise_clip) * self.half_range
            next_actions = (self.target_policy.greedy(next_features) + noise).clamp(self.low, self.high)
            next_q = torch.min(*self.q(self.target_critics, next_features, next_actions))
            target = batch.reward + batch.bootstrap.float() * batch.discount * next_q
        q1, q2 = self.q(self.critics, features, batch.actions)
        critic_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        self.steps += 1
        stats = {"critic_loss": critic_loss.item(), "q_mean": q1.mean().item()}
        if train_policy and self.steps % c.policy_delay == 0:
            self.critics.requires_grad_(False)  # the actor's loss moves the actor only
            actor_loss = -self.q(self.critics, features.detach(), self.policy.greedy(features.detach()))[0].mean()
            self.critics.requires_grad_(True)
            self.policy_optimizer.zero_grad()
            actor_loss.backward()
            self.policy_optimizer.step()
            with torch.no_grad():
                for target_net, net in ((self.target_critics, self.critics), (self.target_policy, self.policy)):
                    for t, o in zip(target_net.parameters(), net.parameters()):
                        t.lerp_(o, c.tau)
            stats["actor_loss"] = actor_loss.item()
        return {f"{self.name}/{k}": v for k, v in stats.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"critics": self.critics.state_dict(), "target_critics": self.target_critics.state_dict(),
                "target_policy": self.target_policy.state_dict(), "steps": self.steps,
                "policy_optimizer": self.policy_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("critics", "target_critics", "target_policy", "policy_optimizer", "critic_optimizer"):
            getattr(self, key).load_state_dict(state[key])
        self.generator.set_state(state["generator"])
        self.steps = state["steps"]

"""REINFORCE (Williams 1992) as an ``OnPolicyLearner``: each chunk step's log-probability weighted by its discounted
return to the episode's end (standardised over the batch, the baseline). Configured by ``ReinforceConfig``."""

from __future__ import annotations

from typing import ClassVar

import torch

from embodied.api import (LearnerSpec, Trajectory, UpdateContext, expand_mask, expand_rows, flatten, learning_rate,
                          take, to_device)
from my_algo.reinforce_config import ReinforceConfig


def returns_to_go(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted return from each chunk step to the episode's end, [T, N] (one episode per env, from t = 0)."""
    out, running = torch.zeros_like(rewards), torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


class Reinforce:
    """What ``ActorWorker`` trains through (``embodied.algorithms.base.OnPolicyLearner``)."""

    summed_metrics: ClassVar[frozenset[str]] = frozenset()  # batch metrics that are counts: none

    def __init__(self, cfg: ReinforceConfig, spec: LearnerSpec) -> None:
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(spec.seed)  # the minibatch order

    def new_optimizer(self, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr, eps=self.cfg.adam_eps)

    def update(self, trajectories: list[Trajectory], iteration: int, ctx: UpdateContext) -> dict[str, float]:
        c, traj = self.cfg, Trajectory.concat(trajectories)
        returns = returns_to_go(traj.rewards.sum(-1), c.gamma)  # [T, N]
        ran = returns[traj.executed.any(-1)]
        weights = (returns - ran.mean()) / (ran.std() + 1e-8) if c.normalize_returns else returns
        batch = flatten(traj, weights, returns)  # [T * N, ...]: forward_inputs, actions, executed, advantages...
        losses, norms = [], []
        for epoch in range(c.update_epochs):
            order = torch.randperm(len(batch["executed"]), generator=self.generator)
            for k, rows in enumerate(order.chunk(c.num_minibatches)):
                lr = learning_rate(c, ctx.lr, ctx.total_iterations, iteration, epoch * c.num_minibatches + k)
                ctx.optimizer.param_groups[0]["lr"] = lr  # anneal_lr, lr_warmup_iterations
                mb = to_device(take(batch, rows), ctx.device)
                logprobs, _, _ = ctx.policy.evaluate(mb["forward_inputs"], mb["actions"])
                mask = expand_mask(mb["executed"], logprobs).float()  # sub-steps that ran
                loss = -(logprobs * expand_rows(mb["advantages"], logprobs) * mask).sum() / mask.sum().clamp_min(1)
                ctx.optimizer.zero_grad()
                ctx.ranks.backward(loss)
                norms.append(float(torch.nn.utils.clip_grad_norm_(ctx.params, c.max_grad_norm)))
                ctx.optimizer.step()
                ctx.after_step()  # the worker's weight average (actor.ema_decay)
                losses.append(loss.item())
        return {"train/policy_loss": sum(losses) / len(losses), "train/grad_norm": sum(norms) / len(norms),
                "train/lr": lr, "reinforce/return_mean": float(ran.mean())}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state()}  # beside the worker's keys in a checkpoint: exact resume

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if "generator" in state:
            self.generator.set_state(state["generator"])

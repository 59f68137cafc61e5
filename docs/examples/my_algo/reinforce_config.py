"""REINFORCE's configuration: the ``algorithm:`` section of a run that names it. Torch-free (the config loader
imports it before any worker starts); ``algorithm_class`` names the learner, loaded on first use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from embodied.api import OnPolicyConfig, RolloutReset

if TYPE_CHECKING:
    from embodied.api import Config


@dataclass
class ReinforceConfig(OnPolicyConfig):
    """REINFORCE with a standardised-return baseline, one episode per env per rollout epoch."""

    algorithm_class: ClassVar[str] = "my_algo.reinforce:Reinforce"
    needs_whole_episodes: ClassVar[bool] = True  # a return runs to the episode's end: no auto-reset, no cut episodes

    name: str = "reinforce"  # the algorithm's name
    gamma: float = 0.99  # discount per chunk step
    normalize_returns: bool = True  # standardise the batch's returns (the baseline)
    update_epochs: int = 1  # (OnPolicyConfig's, a new default) one pass: the data is the acting policy's
    num_minibatches: int = 1  # (OnPolicyConfig's, a new default) one gradient step per pass

    def rollout_reset(self, iteration: int, num_envs: int, seed: int) -> RolloutReset:
        return RolloutReset(seed + iteration * num_envs)  # a fresh episode in every env, each with its own seed

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)  # OnPolicyConfig's checks: epochs, minibatches, clip, optimizer
        if not 0.0 < self.gamma <= 1.0:
            p.append(f"algorithm.gamma: must be in (0, 1], got {self.gamma}")
        if cfg.actor.num_ranks != 1 or cfg.actor.grad_accumulation_steps != 1:
            p.append("actor.num_ranks / actor.grad_accumulation_steps: REINFORCE here steps one rank on whole "
                     "minibatches; set both 1")
        return p

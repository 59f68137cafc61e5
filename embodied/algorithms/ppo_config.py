"""``algorithm.name: ppo``'s configuration: clipped PPO with GAE over chunk steps (``embodied.algorithms.ppo``).

Torch-free, so that loading a config imports no torch; the registry entry point of ``ppo`` names this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from embodied.config.algorithm import OnPolicyConfig

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class PPOLoopConfig(OnPolicyConfig):
    """What PPO's update loop (``ppo.PPO.update``) reads beyond the family's fields: an early stop on the KL, and
    minibatches with a non-finite loss skipped. GRPO and RLOO run the same loop."""

    target_kl: float | None = None  # stop the update early when approx_kl exceeds this
    # A minibatch with a NaN/inf loss or gradient is skipped and counted (off: the run stops).
    skip_nonfinite_updates: bool = False

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)
        if self.target_kl is not None and not self.target_kl > 0:
            p.append(f"algorithm.target_kl: must be > 0 (or null), got {self.target_kl}")
        return p


@dataclass
class PPOConfig(PPOLoopConfig):
    """The ``algorithm:`` section of a PPO run (Schulman et al. 2017), the default: clipped policy gradient with
    GAE and a value head (the loop's fields are ``PPOLoopConfig``'s and ``OnPolicyConfig``'s)."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.ppo:PPO"
    staleness_correction: ClassVar[bool] = True  # decoupled PPO: runner.mode=async trains on older weights' data

    name: str = "ppo"  # registered algorithm name
    # First iterations train only the policy's value head, after SFT, before the policy moves.
    critic_warmup_iterations: int = 0
    gamma: float = 0.99  # discount per chunk step
    gae_lambda: float = 0.95  # GAE lambda
    clip_coef: float = 0.2  # PPO ratio clip (and value clip when clip_vloss)
    clip_vloss: bool = True  # clip the value loss around the old values
    vf_coef: float = 0.5  # value-loss weight
    ent_coef: float = 0.0  # entropy-bonus weight
    # Rewards are multiplied by this before GAE, so the value head learns returns of order 1
    # (Adam moves a weight about lr per step: a head at 0 never reaches returns of -60 at lr 1e-4).
    # Logged returns stay in the env's units.
    reward_scale: float = 1.0
    normalize_advantages: bool = True  # per-minibatch advantage normalisation
    # What an episode's end bootstraps from: "truncated" (V(final_obs) after a truncation, 0 after a termination) or
    # "always" (after a termination too, as ManiSkill's PPO baselines do: there a success terminates an episode
    # whose dense reward would otherwise go on).
    bootstrap_at_done: Literal["truncated", "always"] = "truncated"
    # GAE normalized over the k-step returns that fit before the episode's or rollout's end (ManiSkill's PPO
    # baselines' default) instead of over an infinite horizon; see ``gae.compute_gae``.
    finite_horizon_gae: bool = False
    # runner.mode=async: how many weight versions older than the actor's a trajectory may be when trained on
    # (producers wait rather than run further ahead); 0 is synchronous PPO.
    max_staleness: int = 1

    def warmup_iterations(self) -> int:
        return self.critic_warmup_iterations

    def bootstraps_terminations(self) -> bool:
        return self.bootstrap_at_done == "always"

    def staleness_limit(self) -> int:
        return self.max_staleness

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)
        if self.critic_warmup_iterations < 0:
            p.append(f"algorithm.critic_warmup_iterations: must be >= 0, got {self.critic_warmup_iterations}")
        if not 0.0 < self.gamma <= 1.0:
            p.append(f"algorithm.gamma: must be in (0, 1], got {self.gamma}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            p.append(f"algorithm.gae_lambda: must be in [0, 1], got {self.gae_lambda}")
        if not self.clip_coef > 0:
            p.append(f"algorithm.clip_coef: must be > 0, got {self.clip_coef}")
        if not self.reward_scale > 0:
            p.append(f"algorithm.reward_scale: must be > 0, got {self.reward_scale}")
        if not self.vf_coef >= 0:
            p.append(f"algorithm.vf_coef: must be >= 0, got {self.vf_coef}")
        if not self.ent_coef >= 0:
            p.append(f"algorithm.ent_coef: must be >= 0, got {self.ent_coef}")
        if self.max_staleness < 0:
            p.append(f"algorithm.max_staleness: must be >= 0 (weight versions; 0 is synchronous), got "
                     f"{self.max_staleness}")
        return p

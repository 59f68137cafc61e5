"""TD3's configuration: the ``algorithm:`` section of a run that names it. Torch-free; ``algorithm_class`` names the
learner, loaded on first use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied.api import Config, TDConfig


@dataclass
class TD3Config(TDConfig):
    """TD3 (Fujimoto et al. 2018) over action chunks: twin critics and their targets, target policy smoothing, a
    delayed deterministic actor (the tanh-Gaussian policy's greedy chunk). Replay, pacing, ``gamma``, ``n_step``
    and critic warm-up are ``TDConfig``'s."""

    algorithm_class: ClassVar[str] = "my_algo.td3:TD3"
    needs_q_functions: ClassVar[bool] = True  # the policy offers features and chunks the critics read
    policy_head: ClassVar[str] = "tanh_gaussian"  # rollouts sample it (exploration); the actor is its mean

    name: str = "td3"  # the algorithm's name
    tau: float = 0.005  # polyak rate of the target networks
    policy_noise: float = 0.2  # target smoothing noise, as a fraction of each action's half-range
    noise_clip: float = 0.5  # ... clipped to this fraction
    policy_delay: int = 2  # critic steps per actor step
    critic_hidden_sizes: tuple[int, ...] = (256, 256)  # each critic's layers

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)  # TDConfig's and the off-policy loop's checks
        if not 0 < self.tau <= 1:
            p.append(f"algorithm.tau: must be in (0, 1], got {self.tau}")
        if self.policy_noise < 0 or self.noise_clip < 0:
            p.append(f"algorithm.policy_noise, algorithm.noise_clip: must be >= 0, got {self.policy_noise}, "
                     f"{self.noise_clip}")
        if self.policy_delay < 1:
            p.append(f"algorithm.policy_delay: must be >= 1, got {self.policy_delay}")
        return p

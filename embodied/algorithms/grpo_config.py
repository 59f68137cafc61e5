"""``algorithm.name: grpo``'s configuration: group-relative policy optimisation over whole episodes
(``embodied.algorithms.grpo``). Torch-free, so that loading a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from embodied.algorithms.ppo_config import PPOLoopConfig
from embodied.config.algorithm import RolloutReset
from embodied.core import seeds

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class GRPOConfig(PPOLoopConfig):
    """The ``algorithm:`` section of a GRPO run: no critic, so no discount, GAE or value loss; every rollout epoch
    resets all envs and runs one episode per env (``needs_whole_episodes``)."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.grpo:GRPO"
    needs_whole_episodes: ClassVar[bool] = True

    name: str = "grpo"  # registered algorithm name
    clip_coef: float = 0.2  # ratio clip on both sides, where clip_coef_low / clip_coef_high are null
    ent_coef: float = 0.0  # entropy-bonus weight
    group_size: int = 8  # envs per group, sharing one reset seed (env.num_envs must be a multiple)
    grpo_score: Literal["return", "success"] = "return"  # what is compared within a group
    # What the loss averages over. "token": every executed sub-step of the batch (DAPO), so an episode
    # weighs as much as it is long; "episode": each episode's sub-steps, then the episodes (DeepSeekMath's
    # GRPO), so a group's advantages sum to zero in the loss even when successes end their episodes early.
    grpo_loss_mean: Literal["token", "episode"] = "token"
    clip_coef_low: float | None = None  # ratio clip below 1 (null: clip_coef)
    clip_coef_high: float | None = None  # ratio clip above 1 (null: clip_coef; larger explores more)

    def rollout_reset(self, iteration: int, num_envs: int, seed: int) -> RolloutReset:
        """Every env resets first, ``group_size`` consecutive envs from one seed of the iteration range."""
        return RolloutReset(seeds.iteration_seed(seed, iteration), self.group_size)

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)
        if not self.clip_coef > 0:
            p.append(f"algorithm.clip_coef: must be > 0, got {self.clip_coef}")
        if not self.ent_coef >= 0:
            p.append(f"algorithm.ent_coef: must be >= 0, got {self.ent_coef}")
        for name in ("clip_coef_low", "clip_coef_high"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                p.append(f"algorithm.{name}: must be > 0, got {value}")
        if self.group_size < 2:
            p.append(f"algorithm.group_size: GRPO compares envs within a group, so >= 2, got {self.group_size}")
        elif cfg.env.num_envs % self.group_size:
            p.append(f"algorithm.group_size: env.num_envs={cfg.env.num_envs} is not a multiple of "
                     f"group_size={self.group_size}")
        elif any(n % self.group_size for n in self._member_counts(cfg)):
            p.append(f"algorithm.group_size: a group shares one reset, so it must sit in one member of the mixture "
                     f"env.id, but the members' shares of env.num_envs are {self._member_counts(cfg)}, not all "
                     f"multiples of group_size={self.group_size}; set env.weights (or env.num_envs) so they are")
        elif self._split_over_ranks(cfg):
            p.append(f"algorithm.group_size: with actor.num_ranks={cfg.actor.num_ranks}, a GRPO group must sit on one "
                     f"rollout rank (its advantages are computed where its trajectories go), but env.num_envs / "
                     f"cluster.num_rollout_workers = {cfg.env.num_envs // cfg.cluster.num_rollout_workers} envs per "
                     f"rank is not a multiple of group_size={self.group_size}")
        return p

    @staticmethod
    def _member_counts(cfg: Config) -> list[int]:
        """The envs of each member of a mixture env ([] for one env id, or a split the env checks refuse)."""
        try:
            return cfg.env.member_counts() if len(cfg.env.members()) > 1 else []
        except (ValueError, KeyError):
            return []

    def _split_over_ranks(self, cfg: Config) -> bool:
        """Several actor ranks, and a group would straddle two rollout ranks."""
        a, c = cfg.actor, cfg.cluster
        if a.num_ranks <= 1 or c.backend != "ray" or c.num_rollout_workers < 1 or c.num_rollout_workers % a.num_ranks \
                or cfg.env.num_envs % c.num_rollout_workers:
            return False  # one rank, or a rank problem the engine's checks report
        return bool((cfg.env.num_envs // c.num_rollout_workers) % self.group_size)

"""The two kinds of algorithm configuration the engine drives, ``OnPolicyConfig`` and ``OffPolicyConfig``: the fields
its on-policy update and its off-policy loop read, beside ``AlgorithmConfig`` (``embodied.config.schema``), the base
of every algorithm's configuration (the ``algorithm:`` section).

As ``policy.type`` picks a registered ``PolicyConfig`` subclass, ``algorithm.name`` picks a registered subclass of
one of these (entry points of the ``embodied.algorithms`` group, lazy ``"module:attr"`` strings): its fields, with
their defaults and one-line docs, are the section, a key it does not have is refused by name, and its ``validate``
holds the checks only it can make. What an algorithm needs of the engine (whole episodes, replay, recorded
observations, correction for stale data) is declared by ``AlgorithmConfig``'s class variables, which the engine
reads instead of testing the name. Torch-free, so that loading a config imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from embodied.config.schema import AlgorithmConfig, Config
from embodied.config.sections import empty_paths


@dataclass
class RolloutReset:
    """Reset every env before the epoch: env ``i`` gets seed ``seed + i // group_size``."""

    seed: int
    group_size: int = 1


@dataclass
class OnPolicyConfig(AlgorithmConfig):
    """What every on-policy learner reads (``OnPolicyLearner.update``): epochs of minibatches over one rollout's
    trajectories, the gradient clip, and the optimizer with its learning-rate schedule
    (``embodied.algorithms.schedule``). What one loop alone reads is its own config's (PPO's early stop and critic
    warm-up: ``embodied.algorithms.ppo_config``)."""

    update_epochs: int = 4  # passes over each rollout batch
    num_minibatches: int = 4  # minibatches per pass
    max_grad_norm: float = 0.5  # gradient-norm clip
    adam_eps: float = 1e-5  # Adam epsilon (algorithm.lr is the learning rate)
    anneal_lr: bool = True  # decay the learning rate linearly to 0 over runner.iterations
    # Iterations over which the learning rate rises linearly from 0, per optimizer step, counted from the first
    # policy update (after warmup_iterations()). Adam's first steps move every weight by about lr
    # whatever its gradient, before its second-moment estimate settles.
    lr_warmup_iterations: int = 0

    def warmup_iterations(self) -> int:
        """First iterations that train only the policy's value head (PPO's ``critic_warmup_iterations``, after SFT):
        the policy holds, and the learning-rate schedule starts after them."""
        return 0

    def rollout_reset(self, iteration: int, num_envs: int, seed: int) -> RolloutReset | None:
        """How the envs start rollout ``iteration`` (1-based) of a run of ``experiment.seed`` ``seed``: reset every
        one first (a ``RolloutReset``), or None to let episodes run on across epochs (PPO's). The driver asks the
        config, so it builds no learner; GRPO resets a group of envs from one seed."""
        return None

    def validate(self, cfg: Config) -> list[str]:
        p = []
        if self.update_epochs < 1:
            p.append(f"algorithm.update_epochs: must be >= 1, got {self.update_epochs}")
        batch = cfg.env.num_envs * cfg.rollout.chunk_steps
        if not 1 <= self.num_minibatches <= batch:
            p.append(f"algorithm.num_minibatches: must be in [1, env.num_envs * rollout.chunk_steps = {batch}], "
                     f"got {self.num_minibatches}")
        if not self.max_grad_norm > 0:
            p.append(f"algorithm.max_grad_norm: must be > 0, got {self.max_grad_norm}")
        if not self.adam_eps > 0:
            p.append(f"algorithm.adam_eps: must be > 0, got {self.adam_eps}")
        if self.lr_warmup_iterations < 0:
            p.append(f"algorithm.lr_warmup_iterations: must be >= 0 (0: no warmup), got {self.lr_warmup_iterations}")
        return p + self._minibatch_split_problems(cfg)

    def _minibatch_split_problems(self, cfg: Config) -> list[str]:
        """Every minibatch splits into equal parts over the actor ranks and micro-batches."""
        a, c = cfg.actor, cfg.cluster
        parts = a.num_ranks * a.grad_accumulation_steps
        if parts <= 1 or a.num_ranks < 1 or a.grad_accumulation_steps < 1:
            return []
        if a.num_ranks > 1 and (c.backend != "ray" or c.num_rollout_workers % a.num_ranks
                                or cfg.env.num_envs % max(c.num_rollout_workers, 1)):
            return []  # the ranks themselves do not fit: the engine's checks say so first
        rows = cfg.env.num_envs * cfg.rollout.chunk_steps  # chunk steps in one rollout epoch
        per_minibatch, rest = divmod(rows, self.num_minibatches)
        if rest or per_minibatch % parts:
            return [f"actor.num_ranks / actor.grad_accumulation_steps: a minibatch of env.num_envs * "
                    f"rollout.chunk_steps / algorithm.num_minibatches = {rows} / {self.num_minibatches} chunk steps "
                    f"does not split into {a.num_ranks} ranks x {a.grad_accumulation_steps} micro-batches of equal "
                    "size"]
        return []


@dataclass
class OffPolicyConfig(AlgorithmConfig):
    """Fields of the off-policy loop the engine runs (``embodied.workers.replay_training``, ``embodied.runs.offpolicy_iterations``):
    replay, its pacing and weight sync; the learner's own fields are the subclass's."""

    off_policy: ClassVar[bool] = True
    records_observations: ClassVar[bool] = True

    utd_ratio: float = 1.0  # gradient updates per chunk transition received (update-to-data ratio)
    sync_every: int = 1  # gradient updates between weight syncs to the rollout workers
    # rollout epoch k + 1 runs while the actor makes epoch k's updates, acting with the weights from before
    # them (embodied/runs/offpolicy_iterations.py); false: rollout and updates take turns
    overlap: bool = True
    batch_size: int = 256  # chunk transitions per gradient update
    replay_capacity: int = 100_000  # chunk transitions the replay ring buffer holds (the oldest go first)
    learning_starts: int = 1_000  # transitions in replay before the first gradient update
    checkpoint_replay: bool = True  # save the replay buffer in checkpoints (false: resume is not exact)
    # RLPD (Ball et al. 2023): demonstrations in a second replay, sampled beside online replay.
    demos: str | list[str] | None = None  # demonstrations folder (`embodied collect` or LeRobot) filling the demo replay, or a list of them read as one
    demo_ratio: float = 0.5  # with demos: share of each batch drawn from the demo replay (RLPD's symmetric 0.5)

    def learner(self) -> Any:
        """The learner class (an ``embodied.algorithms.base.OffPolicyLearner``): ``algorithm_class`` loaded."""
        return self.algorithm_type()

    def replay_returns(self) -> tuple[float, int]:
        """(discount per sub-step, chunks per return) that replay sums its rows' rewards with; a learner that
        bootstraps no value keeps them as they came: (1.0, 1)."""
        return 1.0, 1

    def replay_bootstraps_terminations(self) -> bool:
        """Whether replay's rows bootstrap where their episode terminated too, from its final observation, as they
        do where it was truncated (a TD learner's ``bootstrap_at_done: always``). Off by default."""
        return False

    def warmup_iterations(self) -> int:
        """First iterations in which the learner trains its own networks only (a batch's ``iteration`` up to it: ``OffPolicyLearner.update``)."""
        return 0

    def validate(self, cfg: Config) -> list[str]:
        p = []
        if not self.utd_ratio > 0:
            p.append(f"algorithm.utd_ratio: gradient updates per chunk transition received must be > 0, got "
                     f"{self.utd_ratio}")
        if self.batch_size < 1:
            p.append(f"algorithm.batch_size: must be >= 1, got {self.batch_size}")
        elif self.replay_capacity < self.batch_size:
            p.append(f"algorithm.replay_capacity: {self.replay_capacity} is below one batch (algorithm.batch_size="
                     f"{self.batch_size})")
        if self.sync_every < 1:
            p.append(f"algorithm.sync_every: must be >= 1 gradient update, got {self.sync_every}")
        if self.learning_starts < 0:
            p.append(f"algorithm.learning_starts: must be >= 0, got {self.learning_starts}")
        if not 0.0 <= self.demo_ratio <= 1.0:
            p.append(f"algorithm.demo_ratio: the share of a batch drawn from demonstrations must be in [0, 1], "
                     f"got {self.demo_ratio}")
        p += empty_paths("algorithm.demos", self.demos)
        return p + self._engine_problems(cfg)

    def _engine_problems(self, cfg: Config) -> list[str]:
        """What the off-policy loop and actor cannot run with."""
        p, name = [], self.name
        if cfg.runner.mode != "sync":
            p.append(f"runner.mode: algorithm.name={name} runs its own loop (embodied.runs.offpolicy_iterations); leave "
                     f"runner.mode=sync, got {cfg.runner.mode}")
        if self.overlap and cfg.cluster.placement == "colocated":
            p.append("cluster.placement: colocated rollout workers act with the actor's own module, which "
                     "algorithm.overlap trains while they act; use disaggregated (or leave it unset), or "
                     "algorithm.overlap=false")
        if cfg.actor.strategy == "fsdp":
            p.append(f"actor.strategy: algorithm.name={name} keeps its small actor, critics and temperature whole on "
                     f"every actor rank and all-reduces their gradients (ddp); fsdp is not supported, use ddp")
        if cfg.actor.num_ranks > 1 and self.batch_size % cfg.actor.num_ranks:
            p.append(f"algorithm.batch_size: each of actor.num_ranks={cfg.actor.num_ranks} ranks draws an equal share "
                     f"of every batch from its own replay, so batch_size must be a multiple of it, got "
                     f"{self.batch_size}")
        if cfg.actor.grad_accumulation_steps != 1:
            p.append(f"actor.grad_accumulation_steps: algorithm.name={name} splits each replay batch over the actor "
                     f"ranks only (algorithm.batch_size sets its size); set 1, got {cfg.actor.grad_accumulation_steps}")
        if cfg.actor.ema_decay > 0:
            p.append(f"actor.ema_decay: algorithm.name={name} keeps polyak target critics, not a weight average; "
                     f"set 0, got {cfg.actor.ema_decay}")
        return p


@dataclass
class TDConfig(OffPolicyConfig):
    """An off-policy learner that bootstraps a value (temporal differences): its discount, n-step returns over chunks
    and critic warm-up, beside the replay loop's fields."""

    gamma: float = 0.99  # discount per env sub-step (a chunk's bootstrap is discounted by gamma ** sub-steps run)
    # First iterations train only the critics (the actor and its temperature stay), after SFT, before the policy moves.
    critic_warmup_iterations: int = 0
    # chunk transitions summed into one TD target (n-step return over chunks; 1: one chunk). A window stops where
    # its episode ends (a truncation bootstraps from final_obs) or where the rollout epoch ends.
    n_step: int = 1
    # What an episode's end bootstraps from: "truncated" (final_obs after a truncation, nothing after a termination)
    # or "always" (final_obs after either, as ManiSkill's SAC does: where a success ends the episode but the dense
    # reward still pays each step before it, a success that ends the return is worth less than hovering near it).
    # A demonstration's last chunk has no observation after it, so under "always" it bootstraps from its own.
    bootstrap_at_done: Literal["truncated", "always"] = "truncated"

    def replay_returns(self) -> tuple[float, int]:
        return self.gamma, self.n_step

    def replay_bootstraps_terminations(self) -> bool:
        return self.bootstrap_at_done == "always"

    def warmup_iterations(self) -> int:
        return self.critic_warmup_iterations

    def validate(self, cfg: Config) -> list[str]:
        p = super().validate(cfg)
        if not 0.0 < self.gamma <= 1.0:
            p.append(f"algorithm.gamma: must be in (0, 1], got {self.gamma}")
        if self.critic_warmup_iterations < 0:
            p.append(f"algorithm.critic_warmup_iterations: must be >= 0, got {self.critic_warmup_iterations}")
        if self.n_step < 1:
            p.append(f"algorithm.n_step: chunk transitions per TD target must be >= 1, got {self.n_step}")
        return p


def whole_episode_problems(cfg: Config, episode_steps: int) -> list[str]:
    """An algorithm that ``needs_whole_episodes``: a rollout's chunk steps must cover ``episode_steps`` sub-steps
    (the env's cap)."""
    covered = cfg.rollout.chunk_steps * cfg.policy.action_chunk
    if not cfg.algorithm.needs_whole_episodes or covered >= episode_steps:
        return []
    return [f"rollout.chunk_steps: algorithm.name={cfg.algorithm.name} needs whole episodes, but "
            f"{cfg.rollout.chunk_steps} chunk steps x policy.action_chunk={cfg.policy.action_chunk} = {covered} "
            f"sub-steps < env.max_episode_steps={episode_steps}"
            + (" (the env's own cap: env.max_episode_steps is not set)" if cfg.env.max_episode_steps is None else "")]

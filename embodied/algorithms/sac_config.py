"""``algorithm.name: sac``'s configuration: soft actor-critic over action chunks (``embodied.algorithms.sac``). The
replay, pacing and sync fields the engine's off-policy loop reads are ``OffPolicyConfig``'s, its discount and n-step
returns ``TDConfig``'s. Torch-free, so that loading a config imports no torch.

What is a field here and what is an algorithm of its own: a field tunes a part SAC and its variants share, an
algorithm replaces SAC's policy objective (``SACLearner.policy_objective``) with a config class of its own.

- REDQ / SAC-N (``num_critics``, ``critic_subset``, ``policy_q``) and RLPD's ``critic_layernorm`` shape the critic
  ensemble and how its values are reduced; DrQ (``image_shift``) augments what the encoder the critics train sees.
  Hyperparameters of SAC's critics and encoder: fields.
- TD3+BC (``bc_weight``) adds a term on the demonstration rows to whichever policy objective trains (SAC's or
  AWAC's: ``SACLearner.with_demo_term``); it replaces none and only exists with ``demos``: an option of the family
  used with demonstrations, a field.
- AWAC replaces the policy's loss (advantage-weighted regression onto replay's chunks, no critic action gradient):
  ``algorithm.name: awac`` (``awac_config.AWACConfig``), where ``awr_temperature`` lives (``split_off``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from embodied.config.algorithm import TDConfig
from embodied.config.schema import AlgorithmConfig, KeyMove
from embodied.policy.config import PolicyConfig, PolicySpec

if TYPE_CHECKING:
    from embodied.config.schema import Config

LOG_STD_BOUNDS = (-5.0, 2.0)  # the actor's log-std is squashed into these (CleanRL's)


@dataclass
class TanhGaussianConfig(PolicyConfig):
    """The policy a SAC-family run trains (``tanh_gaussian``, the registered policy head): a tanh-squashed Gaussian
    over action chunks (``embodied.algorithms.sac_actor.TanhGaussianActor``) on the observation encoder of the
    ``policy:`` section (``encoder``). Built by ``tanh_gaussian`` from that section, never written in a recipe."""

    type: str = "tanh_gaussian"  # "<policy.type>/tanh_gaussian": what init_from compares (checkpoint.store.trained_type)
    encoder: PolicyConfig | None = None  # the policy section whose encoder (PolicyConfig.encoder_class) the head reads
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # the head's ReLU layers (policy.head_sizes())
    log_std_min: float = LOG_STD_BOUNDS[0]  # algorithm.log_std_min
    log_std_max: float = LOG_STD_BOUNDS[1]  # algorithm.log_std_max

    model_class: ClassVar[str] = "embodied.algorithms.sac_actor:TanhGaussianActor"

    @property
    def encoder_type(self) -> str:
        return self.encoder.type if self.encoder is not None else "none"

    def required_observations(self) -> set[str]:
        return self.encoder.required_observations() if self.encoder is not None else set()

    def architecture(self) -> dict[str, Any]:
        return {**(self.encoder.architecture() if self.encoder is not None else {}), "hidden_sizes": self.hidden_sizes}

    def architecture_default(self, name: str) -> Any:
        return self.encoder.architecture_default(name) if self.encoder is not None else None

    def spec_problems(self, spec: PolicySpec) -> list[str]:
        return self.encoder.spec_problems(spec) if self.encoder is not None else []

    def validate(self) -> list[str]:
        """At least one hidden layer, every width positive; log-std bounds in order."""
        problems = ([] if self.hidden_sizes and all(v >= 1 for v in self.hidden_sizes) else
                    [f"policy.hidden_sizes: SAC's tanh-Gaussian head needs at least one layer, every width >= 1, got "
                     f"{self.hidden_sizes}"])
        if not self.log_std_min < self.log_std_max:
            problems.append(f"algorithm.log_std_min: must be below log_std_max={self.log_std_max}, got "
                            f"{self.log_std_min}")
        return problems


def tanh_gaussian(policy: PolicyConfig, algorithm: AlgorithmConfig) -> TanhGaussianConfig:
    """The ``tanh_gaussian`` policy head (entry point ``embodied.policy_heads``): SAC's actor over ``policy``'s
    encoder, with its ``head_sizes`` and the algorithm's log-std bounds (SAC's fields; CleanRL's bounds for another
    algorithm that names this head). ``ValueError`` when ``policy`` offers no encoder."""
    if not type(policy).encoder_class:
        raise ValueError(f"policy.type: algorithm.name={algorithm.name} trains a tanh-Gaussian head on the policy's "
                         f"observation encoder, which policy.type={policy.type} does not offer (PolicyConfig."
                         f"encoder_class; policy.type mlp and cnn do)")
    refused = policy.own_head_problems(algorithm.name)
    if refused:
        raise ValueError(refused[0])
    bounds = (algorithm.log_std_min, algorithm.log_std_max) if isinstance(algorithm, SACConfig) else LOG_STD_BOUNDS
    return TanhGaussianConfig(type=f"{policy.type}/tanh_gaussian", action_chunk=policy.action_chunk,
                              init_from=policy.init_from, encoder=policy, hidden_sizes=policy.head_sizes(),
                              log_std_min=bounds[0], log_std_max=bounds[1])


# Format 4: the actor a SAC-family algorithm trains holds the policy's encoder as ``encoder.`` (the MLP's states were
# ``states.``, the CNN's image encoder ``features.``), in the policy and in its weight average.
ENCODER_MOVES = tuple(KeyMove(f"{entry}:{old}.", f"{entry}:encoder.", 4, "SAC's actor is a head the algorithm puts "
                              "on the policy's encoder (embodied.algorithms.sac_actor)")
                      for entry in ("policy", "live_policy") for old in ("states", "features"))


def learner_moves(name: str, saved_as: str | None = None) -> tuple[KeyMove, ...]:
    """Where a checkpoint of the SAC family kept its learner's state: under ``saved_as`` (a variant's, written
    before it had a name of its own: ``"sac"``), its policy's optimizer as ``actor_optimizer``, and no target
    encoder where the policy's features have no weights (states)."""
    moves = [KeyMove(f"{saved_as}{suffix}", f"{name}{suffix}", 3, f"algorithm.name={name}'s learner state has its "
                     f"own key") for suffix in ("", "_counters", "_generator")] if saved_as else []
    return (*moves,
            KeyMove(f"{name}.actor_optimizer", f"{name}.policy_optimizer", 3,
                    "SAC's actor is the policy ('actor' is the training worker)"),
            KeyMove("", f"{name}.target_encoder", 3, "a states policy's features have no weights, so the target "
                    "encoder saved nothing", default={}),
            *ENCODER_MOVES)


@dataclass
class SACConfig(TDConfig):
    """The ``algorithm:`` section of a SAC run (Haarnoja et al. 2018; RLPD with demonstrations): off-policy
    actor-critic with an entropy bonus, over action chunks. A chunk [C, A] is the action; ``gamma`` is per *sub-step*. Its three
    Adam optimizers (policy, critics, temperature) take ``algorithm.lr`` (the critics: ``critic_lr`` if set) and Adam's
    own epsilon, with no schedule and no gradient clip. The policy it trains is the ``policy:`` section's type with a
    tanh-squashed Gaussian head (``policy.type: mlp`` or ``cnn``); the critics are its own."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.sac:SACLearner"
    needs_q_functions: ClassVar[bool] = True
    policy_head: ClassVar[str] = "tanh_gaussian"
    split_off: ClassVar[dict[str, str]] = {"awr_temperature": "awac"}  # AWAC's policy loss is an algorithm of its own
    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = learner_moves("sac")

    name: str = "sac"  # registered algorithm name
    tau: float = 0.005  # polyak rate of the target critics (target <- (1 - tau) target + tau online)
    num_critics: int = 2  # Q-functions in the critic ensemble (REDQ/RLPD use 10)
    critic_subset: int = 2  # the TD target takes the min over this many target critics drawn at random
    critic_layernorm: bool = False  # LayerNorm after every hidden layer of the critics (RLPD)
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # widths of every critic's layers
    init_alpha: float = 0.1  # initial entropy temperature (then tuned)
    critic_lr: float | None = None  # the critics' (and image encoder's) learning rate (null: algorithm.lr)
    target_entropy: float | None = None  # entropy the temperature steers to (null: -C * A)
    # On images (DrQ): every update batch's images, obs and next_obs, are shifted at random by up to this many
    # pixels (replicate-padded, cropped back); 0 disables. Only images the policy reads (policy.type=cnn).
    image_shift: int = 4
    # With demos: the policy's loss (SAC's or a variant's) adds bc_weight * mean|Q| * the squared error between its
    # greedy chunk and the demonstrated one, on the batch's demonstration rows (TD3+BC, Fujimoto & Gu 2021, with its
    # alpha = 1 / bc_weight): keeps an SFT-started policy near the demonstrations while the critics are still wrong off
    # them. 0: plain RLPD.
    bc_weight: float = 0.0
    # What the policy maximises over the ensemble: "mean" (REDQ/RLPD) or "min", the most pessimistic critic (SAC-N,
    # An et al. 2021): off the data the critics disagree, so the min penalises chunks that leave it.
    policy_q: Literal["mean", "min"] = "mean"
    log_std_min: float = LOG_STD_BOUNDS[0]  # the actor's log-std is squashed into [log_std_min, log_std_max]
    log_std_max: float = LOG_STD_BOUNDS[1]  # upper bound of the actor's log-std

    def validate(self, cfg: Config) -> list[str]:
        """The critic ensemble, the temperature, the policy's options and head, and the off-policy loop's checks."""
        p = super().validate(cfg)
        try:
            p += self.trained_policy(cfg.policy).validate()
        except ValueError as exc:
            p.append(str(exc))
        if not self.critic_hidden_sizes or any(v < 1 for v in self.critic_hidden_sizes):
            p.append(f"algorithm.critic_hidden_sizes: need at least one layer, every width >= 1, got "
                     f"{self.critic_hidden_sizes}")
        if self.critic_subset < 1 or self.critic_subset > self.num_critics:
            p.append(f"algorithm.critic_subset: the target's min is over 1 to num_critics={self.num_critics} critics, "
                     f"got {self.critic_subset}")
        if self.critic_subset >= 2 and self.num_critics < 2:
            p.append(f"algorithm.num_critics: a min over a subset of {self.critic_subset} critics needs num_critics "
                     f">= 2, got {self.num_critics}")
        if self.num_critics < 1:
            p.append(f"algorithm.num_critics: must be >= 1, got {self.num_critics}")
        if not 0 < self.tau <= 1:
            p.append(f"algorithm.tau: the polyak rate must be in (0, 1], got {self.tau}")
        if not self.init_alpha > 0:
            p.append(f"algorithm.init_alpha: the temperature must be > 0, got {self.init_alpha}")
        if self.critic_lr is not None and not self.critic_lr > 0:
            p.append(f"algorithm.critic_lr: must be > 0 (null: algorithm.lr), got {self.critic_lr}")
        if self.image_shift < 0:
            p.append(f"algorithm.image_shift: the random shift's pixels must be >= 0 (0 disables it), got "
                     f"{self.image_shift}")
        if self.bc_weight < 0:
            p.append(f"algorithm.bc_weight: the behaviour-cloning term's weight must be >= 0 (0: off), got "
                     f"{self.bc_weight}")
        elif self.bc_weight > 0 and (self.demos is None or self.demo_ratio == 0):
            p.append(f"algorithm.bc_weight: the behaviour-cloning term is computed on the batch's demonstration rows, "
                     f"and there are none (algorithm.demos={self.demos}, algorithm.demo_ratio={self.demo_ratio}); set "
                     f"both, or bc_weight=0")
        return p


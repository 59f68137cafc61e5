"""``algorithm.name: dsrl``'s configuration: SAC (``SACConfig``'s fields) over the initial noise of the frozen
flow policy of the ``policy:`` section, whose weights come from ``policy.init_from`` (``embodied.algorithms.dsrl``).
Torch-free, so that loading a config imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from embodied.algorithms.sac_config import SACConfig, learner_moves
from embodied.config.schema import KeyMove
from embodied.config.validate import OBS_MODE_GIVES

if TYPE_CHECKING:
    from embodied.config.schema import Config
    from embodied.policy.config import PolicyConfig


@dataclass
class DSRLConfig(SACConfig):
    """The ``algorithm:`` section of a DSRL run (Wagenmaker et al. 2025): SAC's learner, replay and loop, whose
    action is the noise the frozen flow policy decodes into the env's chunk. Its critics' widths are SAC's
    ``critic_hidden_sizes``."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.dsrl:DSRLLearner"
    policy_head: ClassVar[str] = ""  # the frozen flow policy is steered as it is; the noise policy is DSRL's own
    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = (
        *learner_moves("dsrl", saved_as="sac"),
        KeyMove("policy:actor.", "policy:noise_policy.", 3, "the noise policy is the policy ('actor' is the training "
                "worker)"),
        KeyMove("policy:noise_policy.states.", "policy:noise_policy.encoder.", 4, "the noise policy is SAC's actor "
                "over an encoder (embodied.algorithms.sac_actor)"))

    name: str = "dsrl"  # registered algorithm name
    noise_scale: float = 1.0  # the noise policy's output is tanh(u) * noise_scale, per noise entry
    # What the noise policy and critics see: "encoding", a frozen encoding the flow policy computes anyway (its
    # backbone's or VLM prefix's features, which see the images and the instruction), or "states", the env's states.
    dsrl_features: Literal["encoding", "states"] = "encoding"
    noise_policy_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # the noise policy's layers

    def worker_policy(self, policy: PolicyConfig) -> PolicyConfig:
        """A noise policy over the frozen ``policy`` (``embodied.algorithms.dsrl.DSRLPolicy``)."""
        from embodied.algorithms.dsrl import DSRLPolicyConfig  # torch: only when workers are built

        return DSRLPolicyConfig(action_chunk=policy.action_chunk, frozen=policy, noise_scale=self.noise_scale,
                                features=self.dsrl_features, hidden_sizes=list(self.noise_policy_hidden_sizes))

    def replay_record(self, policy: Any, obs: dict[str, Any], acted: Any = None) -> dict[str, Any]:
        """Replay keeps the frozen policy's features, not the obs (``DSRLPolicy.replay_record``): an update never
        runs the frozen policy."""
        return policy.replay_record(obs, acted)

    def validate(self, cfg: Config) -> list[str]:
        """SAC's checks, the frozen flow policy, the noise policy, and what DSRL cannot take."""
        p = super().validate(cfg)
        if not cfg.policy.flow_noise():
            p.append(f"policy.type: algorithm.name={self.name} steers the initial noise of a flow-matching policy, "
                     f"and policy.type={cfg.policy.type} as configured starts from none (a VLA needs "
                     f"policy.action_head=flow; policy.type=pi0 has one)")
        if not self.noise_scale > 0:
            p.append(f"algorithm.noise_scale: the noise policy's bound tanh(u) * noise_scale must be > 0, got "
                     f"{self.noise_scale}")
        sizes = self.noise_policy_hidden_sizes
        if not sizes or any(v < 1 for v in sizes):
            p.append(f"algorithm.noise_policy_hidden_sizes: need at least one layer, every width >= 1, got {sizes}")
        if self.dsrl_features == "states":
            for section, mode in (("env", cfg.env.obs_mode), ("eval_env", cfg.eval_env.obs_mode)):
                if mode is not None and "states" not in OBS_MODE_GIVES[mode]:
                    p.append(f"algorithm.dsrl_features: 'states' needs states, which {section}.obs_mode={mode!r} does "
                             f"not give; use 'state+rgb' or algorithm.dsrl_features=encoding")
        if self.demos is not None:
            p.append("algorithm.demos: demonstrations hold env chunks, but DSRL's actions are the frozen policy's "
                     "initial noise, which a chunk does not give (RLPD is algorithm.name=sac); unset it")
        if self.n_step != 1:  # DSRL's replay keeps one-chunk TD targets
            p.append(f"algorithm.n_step: algorithm.name={self.name} needs 1, got {self.n_step}")
        return p

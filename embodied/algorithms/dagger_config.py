"""``algorithm.name: dagger``'s configuration: DAgger (Ross, Gordon & Bagnell 2011) with the envs' scripted experts as
the teacher (``embodied.algorithms.dagger``). The policy acts; the training env workers ask each env's scripted
expert (the one ``embodied collect`` records) for its action on every state the policy visits; the policy is trained
on the growing aggregate of those labels, optionally started from demonstrations (``demos``) and with the expert
acting a whole chunk with probability ``beta`` (Ross et al.'s mixture policy). The aggregate is the off-policy loop's
replay (``OffPolicyConfig``: its capacity, batch size, updates per transition and weight sync). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from embodied.config.algorithm import OffPolicyConfig
from embodied.config.schema import ExpertLabels

if TYPE_CHECKING:
    from embodied.config.schema import Config


@dataclass
class DAggerConfig(OffPolicyConfig):
    """The ``algorithm:`` section of a DAgger run (Ross et al. 2011): the policy acts, the envs' scripted experts
    label every state it visits, and it is trained on the aggregate. Its one Adam optimizer takes ``algorithm.lr``; replay is the aggregate
    dataset, so ``replay_capacity`` should hold every label of the run (the oldest go first when it is full)."""

    algorithm_class: ClassVar[str] = "embodied.algorithms.dagger:DAggerLearner"

    name: str = "dagger"  # registered algorithm name
    beta: float = 0.0  # probability that the expert acts an env's whole chunk at iteration 1 (0: the policy always acts)
    beta_decay: float = 1.0  # factor on beta per iteration (Ross et al.'s beta_i = beta * decay ** (i - 1))
    max_grad_norm: float = 1.0  # gradient-norm clip of each update

    def expert_labels(self) -> ExpertLabels:
        """Every visited state labelled by the env's scripted expert; the expert acts with the beta mixture."""
        return ExpertLabels(mix=self.beta, mix_decay=self.beta_decay)

    def validate(self, cfg: Config) -> list[str]:
        """The mixture, the clip, and what the labels need of the env: per-env scripted experts."""
        p = super().validate(cfg)
        if not 0.0 <= self.beta <= 1.0:
            p.append(f"algorithm.beta: the expert's share of chunks must be in [0, 1], got {self.beta}")
        if not 0.0 < self.beta_decay <= 1.0:
            p.append(f"algorithm.beta_decay: must be in (0, 1], got {self.beta_decay}")
        if not self.max_grad_norm > 0:
            p.append(f"algorithm.max_grad_norm: must be > 0, got {self.max_grad_norm}")
        if cfg.env.vectorization != "per_env":
            p.append(f"env.vectorization: algorithm.name={self.name} labels every visited state with the env's scripted "
                     f"expert, which acts on per-env envs; set per_env, got {cfg.env.vectorization}")
        return p

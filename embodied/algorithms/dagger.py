"""DAgger's learner (``algorithm.name: dagger``, ``DAggerConfig``): supervised steps on the aggregate of expert labels.

    labels, executed = unpack(batch.actions)          # the expert's actions on visited states, and which ran
    loss = policy.supervised_loss(policy.forward_inputs(batch.obs), labels, executed)

It is an ``OffPolicyLearner``: the off-policy loop's replay is DAgger's aggregate dataset D. Each rollout epoch the
policy acts (the expert instead, a whole chunk at a time, with the beta mixture), the env workers label every
executed sub-step with the scripted expert's action on the state it started from (``Trajectory.expert_actions``),
and replay keeps those labels in its action column (``replay_actions``) beside the observations; with ``demos`` the
demonstrations' own actions are labels too (``demo_actions``), sampled at ``demo_ratio`` of each batch. Each
update is the policy's own supervised loss (``Policy.supervised_loss``, SFT's) on a batch drawn uniformly from D:
the policy is trained on the states it visits, which is what behaviour cloning lacks.

Replay's action column holds the labels and the executed mask together, [C, A + 1] per row (the last entry 1.0
where the sub-step ran), since a label of 0 on a sub-step that never ran must not be learnt.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from embodied.algorithms.base import LearnerRanks, LearnerSpec
from embodied.algorithms.transitions import ReplaySample
from embodied.core.types import Trajectory


def pack(labels: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
    """Labels [..., C, A] and the executed mask [..., C] as one tensor [..., C, A + 1]."""
    return torch.cat([labels.float(), executed.float()[..., None]], -1)


def unpack(column: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``pack``'s inverse: labels [..., C, A] and the executed mask (bool [..., C])."""
    return column[..., :-1], column[..., -1] > 0.5


class DAggerLearner:
    """The policy's supervised loss on replay batches of expert labels, with one Adam optimizer (``algorithm.lr``)."""

    name: ClassVar[str] = "dagger"  # checkpoint keys and metric prefix

    def __init__(self, policy: Any, cfg: Any, spec: LearnerSpec) -> None:
        self.policy, self.cfg = policy, cfg
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.policy_optimizer = torch.optim.Adam(self.params, lr=spec.lr)
        self.generator = torch.Generator().manual_seed(spec.seed)  # draws nothing yet; kept for the protocol's resume
        self.ranks: LearnerRanks | None = None

    def join(self, ranks: LearnerRanks) -> None:
        """Nothing of its own to make equal (the worker makes the policy so); the gradients are summed over ``ranks``."""
        self.ranks = ranks

    def replay_actions(self, trajectory: Trajectory) -> torch.Tensor:
        """The expert's labels of the trajectory's sub-steps and which ran, packed [T, N, C, A + 1]."""
        if trajectory.expert_actions is None:
            raise ValueError("algorithm.name=dagger: the trajectory carries no expert labels (the training env "
                             "workers were not asked for them: AlgorithmConfig.expert_labels)")
        return pack(trajectory.expert_actions, trajectory.executed)

    def demo_actions(self, actions: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        """Demonstrated chunks are the expert's labels of their states."""
        return pack(actions, executed)

    def update(self, batch: ReplaySample) -> dict[str, float]:
        """One supervised step on ``batch`` (this rank's share: with several ranks the loss is scaled by the share and
        the gradients summed over the ranks, so they step as one on the whole batch)."""
        ranks = self.ranks
        labels, executed = unpack(batch.actions)
        share = 1.0 / ranks.size if ranks is not None else 1.0
        loss = self.policy.supervised_loss(self.policy.forward_inputs(batch.obs), labels, executed)
        self.policy_optimizer.zero_grad()
        (loss * share).backward()
        if ranks is not None:
            ranks.reduce_gradients(self.params)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.policy_optimizer.step()
        return {"dagger/policy_loss": loss.item(), "dagger/grad_norm": float(norm),
                "dagger/demo_share": batch.demo_rows / max(len(labels), 1)}

    def state_dict(self) -> dict[str, Any]:
        """Its stream (the optimizer travels as the worker's ``policy_optimizer``)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])

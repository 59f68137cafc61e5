"""RL maths as pure functions of tensors, and the algorithms the actor trains with.

Algorithms are found by ``algorithm.name`` through ``embodied.core.registry.ALGORITHMS`` (entry points of the
``embodied.algorithms`` group), as envs and policies are: each name stands for a configuration class
(``embodied.config.AlgorithmConfig``), which is the ``algorithm:`` section and names what trains with it. The
built-ins: ``ppo`` (``ppo_config.PPOConfig``), ``grpo`` (``grpo_config.GRPOConfig``), ``sac``
(``sac_config.SACConfig``), ``dsrl`` (``dsrl_config.DSRLConfig``), ``awac`` (``awac_config.AWACConfig``) and
``dagger`` (``dagger_config.DAggerConfig``). Names are imported on first use, so that a config loads without torch.
"""

from __future__ import annotations

from embodied.core.registry import lazy_attributes

DEFAULT_NAME = "ppo"  # algorithm.name when a config leaves it out

_WHERE = {
    "LearnerSpec": "base", "LossOutput": "base", "OffPolicyLearner": "base", "build_learner": "base", "OnPolicyLearner": "base", "RolloutReset": "base",
    "UpdateContext": "base",
    "compute_gae": "gae", "episode_mean_weights": "grpo", "group_advantages": "grpo", "grpo_loss": "grpo",
    "learning_rate": "schedule", "normalize_advantages": "ppo", "ppo_loss": "ppo",
}
_lazy = lazy_attributes(__name__, _WHERE)


def __getattr__(name: str) -> object:
    if name == "PPOLossOutput":  # ppo_loss returns the one loss record now; kept for a release
        import warnings

        warnings.warn("embodied.algorithms.PPOLossOutput is embodied.algorithms.LossOutput now: ppo_loss returns it, "
                      "its terms in .stats (out.stats['policy_loss'], ...)", FutureWarning, stacklevel=2)
        return _lazy("LossOutput")
    return _lazy(name)


__all__ = ["DEFAULT_NAME", *sorted(_WHERE)]

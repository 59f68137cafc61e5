"""The typed schema of an experiment: every field, its default and a one-line doc.

YAML files in ``configs/`` hold values only; ``embodied.config.loader`` turns them (plus
``key=value`` overrides) into these dataclasses and validates them before any worker starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from embodied.config.runner import ExtraEval, FaultsConfig, RunnerConfig, due  # noqa: F401
from embodied.config.sections import (DEFAULT_ENV, ActorConfig, ClusterConfig, EnvConfig, EvalEnvConfig,  # noqa: F401
                                      ExperimentConfig, LoggerConfig, Resources, RolloutConfig, SFTConfig, VideoConfig,
                                      default_env_id, split_counts)
from embodied.core.registry import ALGORITHMS, POLICY_HEADS, load_entry_point
from embodied.policy.config import PolicyConfig


# The package that declares the built-in algorithms names the default one (``algorithm.name`` left out): read
# through an entry point, as every algorithm is, so that the engine names none.
DEFAULT_ALGORITHM = "embodied.algorithms:DEFAULT_NAME"


@dataclass(frozen=True)
class ExpertLabels:
    """What an algorithm asks of the training env workers' scripted experts (an env capability: the env's expert,
    as ``embodied collect`` uses it, labels every executed sub-step with its own action on that state;
    ``ChunkedVectorEnv.labelled_chunk_step``). With ``mix`` > 0 each env's chunk is the expert's instead of the
    policy's with probability ``mix * mix_decay ** (iteration - 1)`` (DAgger's beta-mixture)."""

    mix: float = 0.0  # probability that the expert acts a whole chunk, at iteration 1
    mix_decay: float = 1.0  # factor on that probability per iteration
    # the run's seed: an epoch's mixture draws come from (seed, iteration, env index), so a resumed run repeats them
    seed: int = 0

    def mix_at(self, iteration: int) -> float:
        """The mixture probability of rollout epoch ``iteration`` (1-based; 0 before training)."""
        return self.mix * self.mix_decay ** max(iteration - 1, 0)


@dataclass(frozen=True)
class KeyMove:
    """A change to where a checkpoint's actor entry keeps a thing (``embodied.checkpoint.migrate``): ``old`` to
    ``new``, dotted paths into the entry (``"sac.actor_optimizer"``), or a state dict's path and a prefix of its keys
    (``"policy:actor."``), or, ``old`` empty, a key a format added and the value ``default`` that stands for it."""

    old: str
    new: str
    since: int  # the first checkpoint format that writes ``new`` (embodied.checkpoint.migrate.FORMAT_VERSION)
    why: str
    default: Any = None


@dataclass
class AlgorithmConfig:
    """Fields every algorithm has. Subclasses add their own, each with a default and a doc line."""

    name: str = ""  # registered algorithm name (see embodied.core.registry.ALGORITHMS); each subclass sets its own
    # Adam's learning rate, of the policy (and of whatever else the learner trains, unless its config says otherwise:
    # SAC's critic_lr). The optimizer's other settings are the algorithm's too (adam_eps, anneal_lr, ...).
    lr: float = 3e-4

    algorithm_class: ClassVar[str] = ""
    """``"module:attr"`` of what trains with this config: an ``embodied.algorithms.base.OnPolicyLearner`` class or an
    ``OffPolicyLearner`` class, built by ``embodied.algorithms.base.build_learner``."""
    off_policy: ClassVar[bool] = False
    """Trains from replay: the run gets the off-policy loop (``embodied.runs.offpolicy_iterations``) and actor
    (``embodied.workers.replay_training``), and the policy the workers build must have Q-functions (``embodied.policy.q_functions``)."""
    records_observations: ClassVar[bool] = False
    """Rollout workers record each observation in the trajectory (``Trajectory.observations``) for replay."""
    needs_whole_episodes: ClassVar[bool] = False
    """One whole episode per env per rollout epoch, every env reset at its start: ``env.auto_reset`` must be off and
    a rollout's chunk steps must cover the env's episode cap (``whole_episode_problems``)."""
    staleness_correction: ClassVar[bool] = False
    """Corrects for data acted by older weights than those it trains (decoupled PPO), so ``runner.mode: async``
    may feed it trajectories up to ``staleness_limit()`` versions old."""

    needs_q_functions: ClassVar[bool] = False
    """Its learner trains Q-functions the policy provides (``embodied.policy.q_functions``): the policy the workers build
    must have them, which is checked before any worker starts."""

    def bootstraps_terminations(self) -> bool:
        """Whether a terminated episode's final observation is valued too, as a truncated one's is: the rollout
        workers then put V(final_obs) in ``Trajectory.final_values`` for every episode that ended (PPO's
        ``bootstrap_at_done: always``). Off by default: a termination has no future, and valuing it costs a forward."""
        return False

    def staleness_limit(self) -> int:
        """How many weight versions older than the actor's a trajectory may be when trained on, under
        ``runner.mode: async`` (0: synchronous). An algorithm with ``staleness_correction`` says (PPO's
        ``max_staleness``)."""
        return 0

    def validate(self, cfg: Config) -> list[str]:
        """Problems only this algorithm can see, in its own fields or against the rest of ``cfg``, each prefixed by
        its field path (``algorithm.x``, ``env.y``). Called by the config loader before any worker starts."""
        return []

    def expert_labels(self) -> ExpertLabels | None:
        """Whether the training env workers label every visited state with their envs' scripted expert's action
        (``ExpertLabels``; ``Trajectory.expert_actions``), and how often that expert acts instead; None: no labels."""
        return None

    policy_head: ClassVar[str] = ""
    """A registered policy head (``embodied.policy_heads``: SAC's ``"tanh_gaussian"``) that this algorithm puts on
    the policy's observation encoder and trains as its actor; empty: the policy as configured trains."""

    def trained_policy(self, policy: PolicyConfig) -> PolicyConfig:
        """The policy this algorithm trains, SFT pre-trains and ``policy.init_from`` must hold: ``policy``, or its
        ``policy_head`` built over it (``ValueError`` when the policy offers no encoder for it)."""
        if not self.policy_head:
            return policy
        return POLICY_HEADS.resolve(self.policy_head)(policy, self)

    split_off: ClassVar[dict[str, str]] = {}
    """Fields this algorithm's config once had that are now another registered algorithm's own: field -> that
    ``algorithm.name`` (SAC's ``awr_temperature`` is AWAC's). A recipe that sets one is refused with the algorithm to
    name; a saved config that set one is read as that algorithm where its config extends this one, and one that left
    it null without it (``embodied.config.loader.saved_form``)."""

    checkpoint_moves: ClassVar[tuple[KeyMove, ...]] = ()
    """Where this algorithm's checkpoints kept things before (its learner's state under another name, a renamed
    optimizer, a policy's renamed modules): ``embodied.checkpoint.migrate`` brings an older checkpoint forward."""

    def worker_policy(self, policy: PolicyConfig) -> PolicyConfig:
        """The policy the workers build for this algorithm: ``trained_policy(policy)``, or what the algorithm wraps
        it in (DSRL: a noise actor over the frozen ``policy``)."""
        return self.trained_policy(policy)

    def replay_record(self, policy: Any, obs: dict[str, Any], acted: Any = None) -> dict[str, Any]:
        """What replay keeps of a batch of observations (rollout workers record it when ``records_observations``).

        By default the obs's array entries as the env gave them (uint8 images stay uint8). ``acted`` is the worker
        policy's ``act`` output on ``obs`` when it acted on it, so an algorithm whose worker policy computes an
        encoding anyway (DSRL: the frozen policy's features) keeps that, rather than computing it again.
        """
        import numpy as np  # only in rollout workers: loading a config imports no numpy

        return {k: v for k, v in obs.items() if isinstance(v, np.ndarray)}

    def algorithm_type(self) -> Any:
        """What trains with this config: ``algorithm_class`` loaded (on first use, so torch only then)."""
        return load_entry_point(self.algorithm_class)


def algorithm_config_class(name: str) -> type[AlgorithmConfig]:
    """The registered configuration dataclass for ``algorithm.name: name``."""
    cls = ALGORITHMS.resolve(name)
    if not (isinstance(cls, type) and issubclass(cls, AlgorithmConfig)):
        raise TypeError(f"algorithm {name!r} resolves to {cls!r}, which is not an AlgorithmConfig subclass")
    return cls


def default_algorithm_name() -> str:
    """``algorithm.name`` when a config leaves it out."""
    return str(load_entry_point(DEFAULT_ALGORITHM))


def default_algorithm() -> AlgorithmConfig:
    """The default algorithm's config with its defaults (``Config()``'s ``algorithm`` section)."""
    name = default_algorithm_name()
    return algorithm_config_class(name)(name=name)


@dataclass
class Config:
    """One experiment."""

    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    eval_env: EvalEnvConfig = field(default_factory=EvalEnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # replaced by the registered subclass of policy.type
    # replaced by the registered subclass of algorithm.name
    algorithm: AlgorithmConfig = field(default_factory=default_algorithm)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    sft: SFTConfig | None = None  # behaviour cloning (`embodied sft`): only where a recipe has one

    def eval_members(self) -> list[str]:
        """The env ids the eval env evaluates: one, or each member of a mixture (each its own eval)."""
        return self.resolved_eval_env().members()

    def member_eval(self, env_id: str) -> Config:
        """This config evaluating one member of a mixture eval env (its own fixed eval set and episode cap)."""
        return dataclasses.replace(self, eval_env=dataclasses.replace(self.eval_env, id=env_id))

    def resolved_eval_env(self) -> EnvConfig:
        """The eval env: eval_env's fields over env's, with auto_reset off."""
        e, o = self.env, self.eval_env
        return EnvConfig(
            id=o.id if o.id is not None else e.id,
            weights=e.weights if o.id is None else None,
            num_envs=o.num_envs if o.num_envs is not None else e.num_envs,
            obs_mode=o.obs_mode if o.obs_mode is not None else e.obs_mode,
            max_episode_steps=o.max_episode_steps if o.max_episode_steps is not None else e.max_episode_steps,
            auto_reset=False,
            kwargs=dict(o.kwargs if o.kwargs is not None else e.kwargs),
            vectorization=o.vectorization,
            preflight=e.preflight,
            step_timeout_s=e.step_timeout_s,
            build_retries=e.build_retries,
            build_backoff_s=e.build_backoff_s,
        )

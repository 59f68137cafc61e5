"""The typed schema of an experiment: every field, its default and a one-line doc.

YAML files in ``configs/`` hold values only; ``embodied.config.loader`` turns them (plus
``key=value`` overrides) into these dataclasses and validates them before any worker starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from embodied.core.registry import ALGORITHMS, load_entry_point
from embodied.policy.config import PolicyConfig


@dataclass
class ExperimentConfig:
    name: str = "experiment"  # run name; each run makes <output_dir>/<name>-<YYYYmmdd-HHMMSS> (-2, -3... if taken)
    seed: int = 0  # seeds torch, numpy and the envs (eval envs use a disjoint range)
    output_dir: str = "runs"  # parent folder of run directories (checkpoints, logs, plots)


@dataclass
class Resources:
    """What one worker of a group reserves on a Ray cluster (the local backend checks GPUs only)."""

    num_cpus: float = 0.0  # 0: the workers of a run share the machine's CPUs
    num_gpus: float = 0.0  # fractions share a GPU between workers
    # Ray custom resources per worker, e.g. {learner: 1} for nodes started with `ray start --resources='{"learner": 4}'`:
    # the group's workers go only to nodes that have them.
    resources: dict[str, float] = field(default_factory=dict)
    # Ray: the group's workers in one Ray placement group of this strategy: packed onto as few nodes as possible or
    # spread over as many as possible (each worker one bundle of the resources above, which must not be all 0);
    # None: no placement group. ("placement" alone is cluster.placement's word: colocated or disaggregated.)
    group_strategy: Literal["pack", "spread", "strict_pack", "strict_spread"] | None = None


@dataclass
class ClusterConfig:
    backend: Literal["local", "ray"] = "local"  # local: workers in this process; ray: one Ray actor each
    # colocated: rollout workers act with the actor's own module (local only: nothing to sync);
    # disaggregated: each rollout worker has its own copy, synced with the trainable tensors and a version.
    # None: colocated on local, disaggregated on Ray.
    placement: Literal["colocated", "disaggregated"] | None = None
    env_resources: Resources = field(default_factory=Resources)  # per env worker
    rollout_resources: Resources = field(default_factory=Resources)  # per rollout worker
    actor_resources: Resources = field(default_factory=Resources)  # per actor rank (actor.num_ranks)
    address: str | None = None  # Ray cluster to join ("host:port" of its head, or "auto"); None starts a local Ray
    connect_timeout_s: float = 30.0  # seconds to reach cluster.address before the run fails with an error
    num_env_workers: int = 1  # E: env worker ranks, each owning a contiguous slice of the envs
    num_rollout_workers: int = 1  # R: rollout worker ranks, independent of E
    torch_threads: int = 1  # torch intra-op threads in each worker (small MLPs run faster on one)


@dataclass
class EnvConfig:
    # A registered env id or 'package.module:attr' (see `embodied list envs`); or a mixture: a list of ids, or a
    # named set (e.g. libero-pro-object), whose members share observation and action spaces and split num_envs.
    id: str | list[str] = field(default_factory=lambda: default_env_id())
    num_envs: int = 32  # N: parallel envs in the training batch
    weights: list[float] | None = None  # a mixture's relative share of num_envs per member (null: equal shares)
    obs_mode: Literal["state", "rgb", "state+rgb"] = "state"  # which observation keys the env produces
    # Env steps (sub-steps, not chunks) before truncation; null: the env's own cap (a built-in task's, a LIBERO
    # suite's published one, a gymnasium id's registered limit), or 50 for an env that declares none.
    max_episode_steps: int | None = None
    auto_reset: bool = True  # reset done envs at the chunk boundary (off: done envs stay done)
    kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments for the env constructor
    # native: an env class that names a batched twin for this obs mode (the built-in tasks, state obs) is stepped
    # by it, a whole chunk of all envs natively; per_env: always one gymnasium env per env (rgb always is).
    vectorization: Literal["native", "per_env"] = "native"
    preflight: bool = True  # run check-env's fast checks on one env in the driver before any worker starts
    # An env step (or reset) that takes longer is a failure: its env worker is restarted (runner.max_worker_restarts).
    step_timeout_s: float | None = 120.0  # null: no limit
    build_retries: int = 2  # an env constructor that raises is tried again this often (EGL, a model compile, a file lock)
    build_backoff_s: float = 1.0  # seconds before the first retry of a constructor, doubled for each next one

    def members(self) -> list[str]:
        """The env ids of this config, each once, in order: ``[id]`` for one env; a list's ids and each named
        set's (``ENV_SETS``) for a mixture."""
        from embodied.core.registry import ENV_SETS

        names = [self.id] if isinstance(self.id, str) else list(self.id)
        ids = [i for name in names for i in (ENV_SETS.resolve(name) if name in ENV_SETS else [name])]
        return list(dict.fromkeys(ids))

    def member(self, env_id: str) -> EnvConfig:
        """This config with one member's id: what builds, checks and evaluates that member."""
        return dataclasses.replace(self, id=env_id, weights=None)

    def first_member(self) -> EnvConfig:
        """The first member's config: members share spaces, so it stands for all where only spaces matter."""
        return self.member(self.members()[0])

    def member_counts(self, num_envs: int | None = None) -> list[int]:
        """Envs of each member in a batch of ``num_envs`` (default ``self.num_envs``): shares by ``weights``
        (equal without), each member at least one env, rounded by largest remainder so they sum to the batch."""
        ids, total = self.members(), self.num_envs if num_envs is None else num_envs
        weights = self.weights if self.weights is not None else [1.0] * len(ids)
        return split_counts(total, weights)


def split_counts(total: int, weights: list[float]) -> list[int]:
    """``total`` items over ``len(weights)`` parts in proportion to ``weights``: each part its share rounded down
    (at least one), then the items left to the parts furthest below their share (ties: the earlier part).
    Raises ``ValueError`` when there are fewer items than parts or a weight is not positive."""
    if total < len(weights):
        raise ValueError(f"{total} envs cannot give each of {len(weights)} members one")
    if not weights or min(weights) <= 0 or not all(map(math.isfinite, weights)):
        raise ValueError(f"weights must be positive numbers, got {weights}")
    ideal = [total * w / sum(weights) for w in weights]
    counts = [max(1, math.floor(x)) for x in ideal]
    while sum(counts) < total:
        counts[max(range(len(counts)), key=lambda i: (ideal[i] - counts[i], -i))] += 1
    while sum(counts) > total:  # the minimum of one took envs from the others
        counts[min((i for i in range(len(counts)) if counts[i] > 1), key=lambda i: (ideal[i] - counts[i], i))] -= 1
    return counts


@dataclass
class EvalEnvConfig:
    """Eval envs; a field left null takes the training env's value. Eval never auto-resets."""

    id: str | list[str] | None = None  # env id, or a mixture (a list or a named set: one eval a member); null = env.id
    num_envs: int | None = None  # parallel eval envs; null = env.num_envs
    obs_mode: Literal["state", "rgb", "state+rgb"] | None = None  # null = env.obs_mode
    max_episode_steps: int | None = None  # null = env.max_episode_steps (both null: the eval env's own cap)
    kwargs: dict[str, Any] | None = None  # null = env.kwargs
    # per_env (not env.vectorization): eval videos get a frame per sub-step, and `embodied eval` gives the same
    # numbers with or without --video (a batched twin matches the per-env path to ~1e-13, not to the bit).
    vectorization: Literal["native", "per_env"] = "per_env"


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
    """The action head its learner trains (SAC's ``"tanh_gaussian"``): the policy section's type is built as its
    variant with that head (``PolicyConfig.with_head``: ``policy.type: mlp`` under SAC is the tanh-Gaussian MLP);
    empty: the policy as configured."""

    def trained_policy(self, policy: PolicyConfig) -> PolicyConfig:
        """The policy this algorithm trains, SFT pre-trains and ``policy.init_from`` must hold: ``policy`` with its
        ``policy_head`` (``ValueError`` when its type has none)."""
        return policy.with_head(self.policy_head, self.name) if self.policy_head else policy

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

    def algorithm_type(self) -> Any:
        """What trains with this config: ``algorithm_class`` loaded (on first use, so torch only then)."""
        return load_entry_point(self.algorithm_class)


def algorithm_config_class(name: str) -> type[AlgorithmConfig]:
    """The registered configuration dataclass for ``algorithm.name: name``."""
    cls = ALGORITHMS.resolve(name)
    if not (isinstance(cls, type) and issubclass(cls, AlgorithmConfig)):
        raise TypeError(f"algorithm {name!r} resolves to {cls!r}, which is not an AlgorithmConfig subclass")
    return cls


DEFAULT_ENV = "embodied.envs:DEFAULT_ID"  # the default recipe's task, which the engine does not name


def default_env_id() -> str:
    """``env.id`` when a config leaves it out."""
    return str(load_entry_point(DEFAULT_ENV))


def default_algorithm_name() -> str:
    """``algorithm.name`` when a config leaves it out."""
    return str(load_entry_point(DEFAULT_ALGORITHM))


def default_algorithm() -> AlgorithmConfig:
    """The default algorithm's config with its defaults (``Config()``'s ``algorithm`` section)."""
    name = default_algorithm_name()
    return algorithm_config_class(name)(name=name)


@dataclass
class RolloutConfig:
    chunk_steps: int = 16  # chunk steps per env in one rollout epoch (T)
    pipeline_stages: int = 1  # 2: each env worker's envs step in two halves, one stepping while the other is inferred


@dataclass
class ActorConfig:
    # Adam learning rate. Its epsilon and schedule are the algorithm's (algorithm.adam_eps, algorithm.anneal_lr,
    # algorithm.lr_warmup_iterations of an on-policy algorithm), where they take effect.
    lr: float = 3e-4
    # Data-parallel actor ranks (cluster.backend=ray): one torch.distributed process group; each minibatch is
    # split over the ranks and the gradients summed, so N ranks take the step one rank would.
    num_ranks: int = 1
    # ddp: every rank holds the whole policy; fsdp: parameters, gradients and optimizer state sharded (FSDP2).
    strategy: Literal["ddp", "fsdp"] = "ddp"
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"  # process-group backend (auto: nccl on GPUs, else gloo)
    grad_accumulation_steps: int = 1  # micro-batches per minibatch: the same step in less memory
    # An exponential moving average of the trained weights, updated after every optimizer step (0: none). Evals,
    # checkpoints' policy/ and what init_from or `embodied eval` reads are the average; rollouts act with the live
    # weights (on-policy), kept in the checkpoint too for resume. openpi trains π0 with 0.99.
    ema_decay: float = 0.0


def due(it: int, every: int, last: int) -> bool:
    """Every ``every`` iterations (0: never) and always at the last one."""
    return it == last or (every > 0 and it % every == 0)


@dataclass
class ExtraEval:
    """One more env evaluated every ``runner.eval_every`` beside the training env (what training does to other
    tasks, or to a perturbed suite), logged as ``eval/<env id>/success_rate`` (and ``/ci_low``, ``/ci_high``)."""

    id: str = ""  # an env id, or a named set (`embodied eval --suites`'s, e.g. libero-pro-object) for each of its ids
    episodes: int = 10  # episodes per eval of each env (a fixed eval set, e.g. LIBERO's: spread evenly over it)
    # env.kwargs set over the eval env's for this one, e.g. {task_ids: [1, 2, 3]}: the other tasks of the suite trained on
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the metric's name, eval/<name>/success_rate (default: the env id); needed to tell apart two
    # entries of the same id

    def validate(self, path: str) -> list[str]:
        """Problems of this entry, each prefixed by ``path`` (``runner.extra_evals[0]``)."""
        from embodied.core.registry import ENV_SETS, ENVS, UnknownNameError

        problems = [] if self.episodes >= 1 else [f"{path}.episodes: must be >= 1, got {self.episodes}"]
        if not self.id.strip():
            return problems + [f"{path}.id: an env id or a named set is needed (`embodied list envs`)"]
        if self.id in ENV_SETS and self.name:
            problems.append(f"{path}.name: {self.id} is a named set of several envs, each logged under its own id")
        if "/" in self.name:
            problems.append(f"{path}.name: {self.name!r} would split the metric's name; use no '/'")
        if self.id not in ENV_SETS:
            try:
                ENVS.entry_point(self.id)
            except UnknownNameError as exc:
                problems.append(f"{path}.id: {exc} Named sets: {', '.join(ENV_SETS.names()) or '(none)'}")
        return problems


@dataclass
class RunnerConfig:
    iterations: int = 100  # training iterations (sync, rollout, update, log)
    # sync: rollout, then update, in turn. async (embodied/runs/async_iterations.py): env and rollout workers keep
    # producing the next rollouts while the actor trains on earlier ones (algorithm.max_staleness bounds the lag).
    mode: Literal["sync", "async"] = "sync"
    eval_every: int = 10  # iterations between evals (0: only at the end)
    eval_episodes: int = 32  # episodes per eval (deterministic actions)
    checkpoint_every: int = 50  # iterations between checkpoints (0: only at the end)
    eval_video: Literal["none", "last", "all"] = "none"  # evals that record videos (see logger.video); envs must render
    # More envs evaluated at every eval beside the training env, each with its own episode count, e.g.
    # [{id: LIBERO-Object-Swap-v0, episodes: 10}]; engine-generic (any env id, or a named set of them).
    extra_evals: list[ExtraEval] = field(default_factory=list)
    # A checkpoint folder, or a run dir (its newest valid checkpoint), to continue in its run dir;
    # "auto": the newest run of experiment.name under experiment.output_dir that has one (else start afresh).
    resume_from: str | None = None
    keep_checkpoints: int = 0  # the newest checkpoints kept on disk (0: all)
    # Env workers that fail (an env raises, hangs past env.step_timeout_s, or its process dies) are restarted and the
    # rollout epoch (or eval round) redone from its start. A rate, not a lifetime count: at most this many restarts
    # within any runner.restart_window iterations, training and eval env workers together; one more stops the run
    # after checkpointing the last completed iteration (0: the first failure stops it).
    max_worker_restarts: int = 3
    restart_window: int = 20  # iterations over which runner.max_worker_restarts counts (3 in 20: hours of LIBERO)
    max_total_restarts: int | None = None  # an optional lifetime cap on the run's env worker restarts (null: none)
    # A worker rebuilt again within runner.restart_window iterations of its last rebuild first waits this long,
    # doubled for each further such rebuild, so a flapping simulator (GL context, license server, disk) can recover.
    restart_backoff_s: float = 5.0  # 0: no wait
    restart_backoff_max_s: float = 300.0  # the backoff's cap (>= runner.restart_backoff_s)
    # A worker that fails the same way (the same env call) within this many iterations of a rebuild from fresh
    # seeds, and again after the next rebuild, fails from any state: the run stops with that diagnosis at once.
    broken_env_iterations: int | None = 5  # null: never diagnosed (only the rate stops the run)
    # Resume a checkpoint's env snapshots (pickles) even when they do not carry a signature made with your own key
    # (embodied.checkpoint.trust): only for a run folder you trust, e.g. one you made on another machine.
    trust_checkpoint: bool = False
    plot: bool = True  # write learning_curves.png into the run dir at the end of training

    def checkpoints_at(self, it: int) -> bool:
        """Whether iteration ``it`` ends with a scheduled checkpoint (a stop signal or a full disk adds others)."""
        return due(it, self.checkpoint_every, self.iterations)


@dataclass
class SFTConfig:
    """Behaviour cloning from demonstrations (``embodied sft``); the result starts RL via policy.init_from."""

    dataset: str | list[str] | None = None  # folder written by `embodied collect`, or a LeRobot dataset folder (docs/lerobot.md); a list of folders reads as one
    # LeRobot datasets: our key (states, main_images, wrist_images, actions) -> the dataset's feature name, e.g.
    # {main_images: observation.images.top}. A key left out is looked up among the usual names (LIBERO's, ALOHA's,
    # embodied's own); null: not read (the policy does not use it).
    features: dict[str, str | None] = field(default_factory=dict)
    frame_cache_mb: float = 1024.0  # LeRobot datasets: decoded camera frames kept in memory (least recently used go)
    epochs: int = 20  # passes over the training episodes
    batch_size: int = 256  # chunk steps per gradient step
    lr: float = 1e-3  # Adam learning rate
    # The learning rate over the run's steps: "constant", or "cosine", decayed from lr to 0 along a half cosine
    # (LeRobot's default for its policies), so the last steps settle rather than move the weights by about lr.
    lr_schedule: Literal["constant", "cosine"] = "constant"
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient-norm clip
    val_fraction: float = 0.1  # episodes held out for the validation loss
    first_step_weight: float = 1.0  # how often each episode's first chunk step is drawn relative to the others (1: uniform); where the demonstrator picks its target, and one row in several
    eval_every: int = 0  # gradient steps between success evals and checkpoints (0: only at the end)
    log_every: int = 20  # gradient steps between metric rows


@dataclass
class VideoConfig:
    """Eval videos: one mp4 per recorded episode plus a tiled grid of them."""

    fps: int = 20  # frames (env sub-steps) per second of video
    size: int = 256  # pixels per side of one episode's frames (resized from the env's render; even)
    max_videos: int = 4  # episodes recorded per eval: the first ones of the fixed eval set
    overlay: bool = True  # draw step, reward, return, success and the instruction on the frames
    grid: bool = True  # also tile the recorded episodes side by side into grid_*.mp4


@dataclass
class LoggerConfig:
    backends: list[Literal["console", "wandb", "tensorboard"]] = field(
        default_factory=lambda: ["console", "wandb"])  # metric sinks (metrics.jsonl is always written)
    project: str = "embodied"  # wandb project
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"  # WANDB_MODE env var overrides
    wandb_summary: bool = False  # print wandb's banner and end-of-run summary (off: wandb stays quiet)
    progress_bar: bool = True  # show a tqdm bar (off: a line per log)
    video: VideoConfig = field(default_factory=VideoConfig)  # eval videos (runner.eval_video, embodied eval --video)


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
    sft: SFTConfig = field(default_factory=SFTConfig)

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

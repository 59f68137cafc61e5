"""The sections of an experiment's config, each a dataclass with every field's default and one-line doc, and the
checks only it can make of its own fields (``validate(path)``); ``embodied.config.schema.Config`` holds them (the
``runner:`` section's are in ``embodied.config.runner``), and ``embodied.config.validate`` adds what no one section
can see (fields against each other's).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from embodied.core.registry import ENV_SETS, ENVS, UnknownNameError, load_entry_point


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
class ExperimentConfig:
    name: str = "experiment"  # run name; each run makes <output_dir>/<name>-<YYYYmmdd-HHMMSS> (-2, -3... if taken)
    seed: int = 0  # seeds torch, numpy and the envs (eval envs use a disjoint range)
    output_dir: str = "runs"  # parent folder of run directories (checkpoints, logs, plots)

    def validate(self, path: str = "experiment") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        return [] if 0 <= self.seed < 2**32 else [f"{path}.seed: must be in [0, 2**32) (numpy's seed range), got "
                                                   f"{self.seed}"]


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

    def validate(self, path: str, backend: str) -> list[str]:
        """Problems of these resources (``path``: ``cluster.env_resources``), on ``backend``."""
        p = [f"{path}.{name}: must be a number >= 0, got {value}" for name, value in
             (("num_cpus", self.num_cpus), ("num_gpus", self.num_gpus)) if not (math.isfinite(value) and value >= 0)]
        p += [f"{path}.resources.{name}: must be a number > 0, got {value!r}" for name, value in self.resources.items()
              if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0)]
        if self.group_strategy is not None and backend != "ray":
            p.append(f"{path}.group_strategy: placement groups are Ray's; cluster.backend is {backend!r}")
        if self.group_strategy is not None and not (self.num_cpus > 0 or self.num_gpus > 0 or self.resources):
            p.append(f"{path}.group_strategy: {self.group_strategy} needs something to place: set num_cpus, num_gpus "
                     f"or resources of {path} (a placement group's bundles cannot be empty)")
        return p


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

    def validate(self, path: str = "cluster") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = [f"{path}.{name}: must be >= 1, got {n}" for name, n in
             (("num_env_workers", self.num_env_workers), ("num_rollout_workers", self.num_rollout_workers)) if n < 1]
        t = self.connect_timeout_s
        if not (math.isfinite(t) and t > 0):
            p.append(f"{path}.connect_timeout_s: must be a positive number of seconds, got {t}")
        if self.torch_threads < 1:
            p.append(f"{path}.torch_threads: must be >= 1, got {self.torch_threads}")
        if self.placement == "colocated" and self.backend == "ray":
            p.append(f"{path}.placement: colocated needs cluster.backend=local (on Ray every worker is a process of "
                     "its own; use disaggregated, or leave placement unset)")
        for group in ("env", "rollout", "actor"):
            p += getattr(self, f"{group}_resources").validate(f"{path}.{group}_resources", self.backend)
        if self.address is not None and self.backend != "ray":
            p.append(f"{path}.address: only used with cluster.backend=ray, got backend={self.backend!r}")
        return p


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

    def validate(self, path: str = "env") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = env_problems(self, path)
        s, b = self.step_timeout_s, self.build_backoff_s
        if not (s is None or (math.isfinite(s) and s > 0)):
            p.append(f"{path}.step_timeout_s: must be a positive number of seconds (or null: no limit), got {s}")
        if self.build_retries < 0:
            p.append(f"{path}.build_retries: must be >= 0 (0: no retry), got {self.build_retries}")
        if not (math.isfinite(b) and b >= 0):
            p.append(f"{path}.build_backoff_s: must be a number of seconds >= 0, got {b}")
        return p

    def members(self) -> list[str]:
        """The env ids of this config, each once, in order: ``[id]`` for one env; a list's ids and each named
        set's (``ENV_SETS``) for a mixture."""
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

    def validate(self, path: str = "eval_env") -> list[str]:
        """Problems of the fields it sets (a field left null is the training env's, checked there)."""
        return env_problems(self, path)


def env_problems(env: EnvConfig | EvalEnvConfig, path: str) -> list[str]:
    """What an env section and an eval env section share: the env count, the episode cap, known ids."""
    p = []
    if env.num_envs is not None and env.num_envs < 1:
        p.append(f"{path}.num_envs: must be >= 1, got {env.num_envs}")
    if env.max_episode_steps is not None and env.max_episode_steps < 1:
        p.append(f"{path}.max_episode_steps: must be >= 1, got {env.max_episode_steps}")
    try:
        for env_id in (EnvConfig(id=env.id).members() if env.id is not None else []):
            ENVS.entry_point(env_id)
    except UnknownNameError as exc:
        p.append(f"{path}.id: {exc} Named sets: {', '.join(ENV_SETS.names()) or '(none)'}")
    return p


DEFAULT_ENV = "embodied.envs:DEFAULT_ID"  # the default recipe's task, which the engine does not name


def default_env_id() -> str:
    """``env.id`` when a config leaves it out."""
    return str(load_entry_point(DEFAULT_ENV))


@dataclass
class RolloutConfig:
    chunk_steps: int = 16  # chunk steps per env in one rollout epoch (T)
    pipeline_stages: int = 1  # 2: each env worker's envs step in two halves, one stepping while the other is inferred

    def validate(self, path: str = "rollout") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        return [f"{path}.{name}: must be >= 1, got {n}" for name, n in
                (("chunk_steps", self.chunk_steps), ("pipeline_stages", self.pipeline_stages)) if n < 1]


@dataclass
class ActorConfig:
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

    def validate(self, path: str = "actor") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = [] if 0.0 <= self.ema_decay < 1.0 else [
            f"{path}.ema_decay: must be in [0, 1) (0: no average), got {self.ema_decay}"]
        return p + [f"{path}.{name}: must be >= 1, got {n}" for name, n in (
            ("num_ranks", self.num_ranks), ("grad_accumulation_steps", self.grad_accumulation_steps)) if n < 1]


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
    # Keep an exponential moving average of the weights with this decay (e.g. 0.999: about the last 1,000 steps); the
    # average is what is validated, evaluated, saved and starts RL. 0: off, the last iterate.
    ema_decay: float = 0.0
    val_fraction: float = 0.1  # episodes held out for the validation loss
    first_step_weight: float = 1.0  # how often each episode's first chunk step is drawn relative to the others (1: uniform); where the demonstrator picks its target, and one row in several
    eval_every: int = 0  # gradient steps between success evals and checkpoints (0: only at the end)
    # Gradient steps between checkpoints written without an eval (0: with the evals and at the end only), so a long SFT
    # that is stopped loses at most this many steps; go on from the last one with policy.init_from. Of these, the newest
    # runner.keep_checkpoints are kept (0: all); the evals' checkpoints always are.
    checkpoint_every: int = 0
    log_every: int = 20  # gradient steps between metric rows

    def validate(self, path: str = "sft") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        checks = ((self.epochs >= 1, "epochs", "must be >= 1"), (self.batch_size >= 1, "batch_size", "must be >= 1"),
                  (self.lr > 0, "lr", "must be > 0"), (self.weight_decay >= 0, "weight_decay", "must be >= 0"),
                  (self.max_grad_norm > 0, "max_grad_norm", "must be > 0"),
                  (0.0 <= self.ema_decay < 1.0, "ema_decay", "must be in [0, 1) (0: off)"),
                  (0.0 <= self.val_fraction < 1.0, "val_fraction", "must be in [0, 1)"),
                  (self.first_step_weight > 0, "first_step_weight", "must be > 0 (1: uniform)"),
                  (self.eval_every >= 0, "eval_every", "must be >= 0"), (self.log_every >= 1, "log_every", "must be >= 1"),
                  (self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0 (0: with the evals only)"),
                  (self.frame_cache_mb >= 0, "frame_cache_mb", "must be >= 0 (0: no cache)"))
        p = [f"{path}.{name}: {rule}, got {getattr(self, name)}" for ok, name, rule in checks if not ok]
        for key, name in self.features.items():
            if key not in SFT_FEATURE_KEYS:
                p.append(f"{path}.features.{key}: unknown key; the keys are {', '.join(SFT_FEATURE_KEYS)}")
            elif name is not None and (not isinstance(name, str) or not name):
                p.append(f"{path}.features.{key}: a feature name (string) or null, got {name!r}")
        return p + empty_paths(f"{path}.dataset", self.dataset)


@dataclass
class VideoConfig:
    """Eval videos: one mp4 per recorded episode plus a tiled grid of them."""

    fps: int = 20  # frames (env sub-steps) per second of video
    size: int = 256  # pixels per side of one episode's frames (resized from the env's render; even)
    max_videos: int = 4  # episodes recorded per eval: the first ones of the fixed eval set
    overlay: bool = True  # draw step, reward, return, success and the instruction on the frames
    grid: bool = True  # also tile the recorded episodes side by side into grid_*.mp4

    def validate(self, path: str = "logger.video") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = [] if self.fps >= 1 else [f"{path}.fps: must be >= 1, got {self.fps}"]
        if not (self.size >= 16 and self.size % 2 == 0):
            p.append(f"{path}.size: must be even and >= 16 (video codecs), got {self.size}")
        if self.max_videos < 1:
            p.append(f"{path}.max_videos: must be >= 1, got {self.max_videos}")
        return p


@dataclass
class LoggerConfig:
    backends: list[Literal["console", "wandb", "tensorboard"]] = field(
        default_factory=lambda: ["console", "wandb"])  # metric sinks (metrics.jsonl is always written)
    project: str = "embodied"  # wandb project
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"  # WANDB_MODE env var overrides
    wandb_summary: bool = False  # print wandb's banner and end-of-run summary (off: wandb stays quiet)
    progress_bar: bool = True  # show a tqdm bar (off: a line per log)
    video: VideoConfig = field(default_factory=VideoConfig)  # eval videos (runner.eval_video, embodied eval --video)

    def validate(self, path: str = "logger") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = self.video.validate(f"{path}.video")
        if len(set(self.backends)) != len(self.backends):
            p.append(f"{path}.backends: each backend at most once, got {self.backends}")
        return p


SFT_FEATURE_KEYS = ("states", "main_images", "wrist_images", "actions")  # what sft.features maps


def empty_paths(name: str, paths: str | list[str] | None) -> list[str]:
    """An empty folder name (an unset shell variable, most often) or an empty list, as a problem naming ``name``."""
    if paths is None:
        return []
    if isinstance(paths, list) and not paths:
        return [f"{name}: an empty list of folders; name at least one, or set it to null"]
    for i, path in enumerate([paths] if isinstance(paths, str) else paths):
        if path.strip() == "":
            where = name if isinstance(paths, str) else f"{name}[{i}]"
            return [f"{where}: an empty path (an unset shell variable?); leave it out or set it to null"]
    return []

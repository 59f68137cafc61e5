"""What a typed config can still get wrong: ranges, names and combinations that types alone cannot
catch, each problem prefixed by its field path (``validate``). ``loader.load_config`` reports them all
at once, before any worker starts. What only one algorithm can see is its config's ``validate``; what it needs
of the engine it declares (``embodied.config.algorithm``), and is checked here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from embodied.config.algorithm import OffPolicyConfig, OnPolicyConfig, empty_paths, whole_episode_problems
from embodied.config.schema import Config, EnvConfig, RunnerConfig
from embodied.core.registry import ENV_SETS, ENVS, UnknownNameError


OBS_MODE_GIVES = {"state": {"states"}, "rgb": {"images"}, "state+rgb": {"states", "images"}}


def _obs_mode_problems(cfg: Config) -> list[str]:
    """The observations the policy needs against what each env's obs_mode gives."""
    needs, problems = cfg.policy.required_observations(), []
    for section, mode in (("env", cfg.env.obs_mode), ("eval_env", cfg.eval_env.obs_mode)):
        if mode is not None and not needs <= OBS_MODE_GIVES[mode]:
            fits = [m for m, gives in OBS_MODE_GIVES.items() if needs <= gives]
            problems.append(f"{section}.obs_mode: policy.type={cfg.policy.type} needs {' and '.join(sorted(needs))}, "
                            f"which {mode!r} does not give; use {' or '.join(fits)}")
    return problems


def _algorithm_problems(cfg: Config) -> list[str]:
    """What the algorithm declares it needs of the engine (its class variables), then its own ``validate``."""
    a, problems = cfg.algorithm, []
    if not isinstance(a, (OnPolicyConfig, OffPolicyConfig)):  # the engine drives these two kinds only
        return [f"algorithm.name: {a.name}'s config {type(a).__name__} must subclass OnPolicyConfig (trained by the "
                f"actor worker's update) or OffPolicyConfig (stepped on replay), of embodied.config"]
    if cfg.runner.mode == "async" and not a.staleness_correction:
        problems.append(f"runner.mode: async trains on data of older weight versions, which algorithm.name={a.name} "
                        f"does not correct for (an algorithm with staleness correction, such as decoupled PPO, does)")
    if cfg.runner.mode == "async" and cfg.cluster.placement == "colocated":
        problems.append("cluster.placement: colocated rollout workers act with the actor's own module, which "
                        "runner.mode=async trains while they act; use disaggregated (or leave it unset)")
    if a.needs_whole_episodes:
        if cfg.env.auto_reset:
            problems.append(f"env.auto_reset: algorithm.name={a.name} runs one episode per env per iteration; set "
                            f"env.auto_reset=false")
        if cfg.env.max_episode_steps is not None:  # else against the env's own cap, before any worker starts (runner)
            problems += whole_episode_problems(cfg, cfg.env.max_episode_steps)
    return problems + a.validate(cfg)


SFT_FEATURE_KEYS = ("states", "main_images", "wrist_images", "actions")


def _actor_rank_problems(cfg: Config) -> list[str]:
    """``actor.num_ranks`` / ``grad_accumulation_steps`` / ``dist_backend`` against the backend and the batch."""
    a, c = cfg.actor, cfg.cluster
    if a.num_ranks < 1:
        return [f"actor.num_ranks: must be >= 1, got {a.num_ranks}"]
    if a.grad_accumulation_steps < 1:
        return [f"actor.grad_accumulation_steps: must be >= 1, got {a.grad_accumulation_steps}"]
    p = []
    if a.num_ranks > 1 and c.backend != "ray":
        p.append(f"actor.num_ranks: {a.num_ranks} ranks need cluster.backend=ray (each rank is a process of its own; "
                 "the local backend runs one actor in this process)")
    if a.num_ranks > 1 and c.num_rollout_workers % a.num_ranks:
        p.append(f"actor.num_ranks: rollout rank r sends its trajectories to actor rank r mod {a.num_ranks}, so "
                 f"cluster.num_rollout_workers={c.num_rollout_workers} must be a multiple of it (every rank an "
                 "equal share)")
    elif a.num_ranks > 1 and cfg.env.num_envs % c.num_rollout_workers:
        p.append(f"actor.num_ranks: env.num_envs={cfg.env.num_envs} does not split evenly over "
                 f"cluster.num_rollout_workers={c.num_rollout_workers}, so the actor ranks would get unequal shares")
    if a.dist_backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            p.append("actor.dist_backend: nccl needs CUDA GPUs and torch sees none here (use gloo, or auto)")
    return p


def _sft_feature_problems(features: dict[str, Any]) -> list[str]:
    """sft.features maps our keys to dataset feature names (a string) or to null (not read)."""
    problems = []
    for key, name in features.items():
        if key not in SFT_FEATURE_KEYS:
            problems.append(f"sft.features.{key}: unknown key; the keys are {', '.join(SFT_FEATURE_KEYS)}")
        elif name is not None and (not isinstance(name, str) or not name):
            problems.append(f"sft.features.{key}: a feature name (string) or null, got {name!r}")
    return problems


def _non_finite(cfg: Any, path: str = "") -> list[str]:
    """Every float field that is NaN or infinite (range checks alone let ``inf`` through)."""
    problems = []
    for f in dataclasses.fields(cfg):
        value, where = getattr(cfg, f.name), f"{path}.{f.name}" if path else f.name
        if dataclasses.is_dataclass(value):
            problems += _non_finite(value, where)
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{where}: must be a finite number, got {value}")
    return problems


def _restart_problems(r: RunnerConfig) -> list[str]:
    """The restart rate, its lifetime cap, the backoff and the broken-env horizon (``embodied.workers.restarts``)."""
    p = []
    if r.max_worker_restarts < 0:
        p.append(f"runner.max_worker_restarts: must be >= 0 (0: no restarts), got {r.max_worker_restarts}")
    if r.restart_window < 1:
        p.append(f"runner.restart_window: must be >= 1 (iterations over which runner.max_worker_restarts counts), "
                 f"got {r.restart_window}")
    if r.max_total_restarts is not None and r.max_total_restarts < 0:
        p.append(f"runner.max_total_restarts: a lifetime cap must be >= 0 (or null: no cap), got "
                 f"{r.max_total_restarts}")
    base, cap = r.restart_backoff_s, r.restart_backoff_max_s
    if not (math.isfinite(base) and base >= 0):
        p.append(f"runner.restart_backoff_s: must be a number of seconds >= 0 (0: no wait), got {base}")
    elif not (math.isfinite(cap) and cap >= base):
        p.append(f"runner.restart_backoff_max_s: the backoff's cap must be >= its base "
                 f"runner.restart_backoff_s={base:g}, got {cap}")
    if r.broken_env_iterations is not None and r.broken_env_iterations < 0:
        p.append(f"runner.broken_env_iterations: must be >= 0 (or null: no diagnosis), got {r.broken_env_iterations}")
    return p


def validate(cfg: Config) -> list[str]:
    """Problems that types alone cannot catch, each prefixed by its field path."""
    p: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            p.append(msg)

    # eval_env fields left null inherit env's and are checked there, so each problem is named once.
    for section, env in (("env", cfg.env), ("eval_env", cfg.eval_env)):
        if env.num_envs is not None:
            need(env.num_envs >= 1, f"{section}.num_envs: must be >= 1, got {env.num_envs}")
        if env.max_episode_steps is not None:
            need(env.max_episode_steps >= 1, f"{section}.max_episode_steps: must be >= 1, got {env.max_episode_steps}")
        try:
            for env_id in (EnvConfig(id=env.id).members() if env.id is not None else []):
                ENVS.entry_point(env_id)
        except UnknownNameError as exc:
            p.append(f"{section}.id: {exc} Named sets: {', '.join(ENV_SETS.names()) or '(none)'}")
    need(cfg.policy.action_chunk >= 1, f"policy.action_chunk: chunk size must be >= 1, got {cfg.policy.action_chunk}")
    for where, path in (("policy.init_from", cfg.policy.init_from), ("runner.resume_from", cfg.runner.resume_from)):
        # `policy.init_from=$RUN` with $RUN unset would otherwise train from scratch without a word.
        need(path is None or path.strip() != "", f"{where}: an empty path (an unset shell variable?); leave it out "
                                                 f"or set it to null to start without one")
    p += cfg.policy.validate()
    p += _obs_mode_problems(cfg)
    for name, ranks in (("num_env_workers", cfg.cluster.num_env_workers),
                        ("num_rollout_workers", cfg.cluster.num_rollout_workers)):
        need(ranks >= 1, f"cluster.{name}: must be >= 1, got {ranks}")
        need(ranks <= max(cfg.env.num_envs, 1),
             f"cluster.{name}: {ranks} ranks for env.num_envs={cfg.env.num_envs}; every rank needs an env")
        eval_envs = cfg.eval_env.num_envs
        need(eval_envs is None or ranks <= max(eval_envs, 1),
             f"cluster.{name}: {ranks} ranks for eval_env.num_envs={eval_envs}; every rank needs an eval env")
    s = cfg.env.step_timeout_s
    need(s is None or (math.isfinite(s) and s > 0),
         f"env.step_timeout_s: must be a positive number of seconds (or null: no limit), got {s}")
    need(cfg.env.build_retries >= 0, f"env.build_retries: must be >= 0 (0: no retry), got {cfg.env.build_retries}")
    b = cfg.env.build_backoff_s
    need(math.isfinite(b) and b >= 0, f"env.build_backoff_s: must be a number of seconds >= 0, got {b}")
    t = cfg.cluster.connect_timeout_s
    need(math.isfinite(t) and t > 0, f"cluster.connect_timeout_s: must be a positive number of seconds, got {t}")
    need(cfg.cluster.torch_threads >= 1, f"cluster.torch_threads: must be >= 1, got {cfg.cluster.torch_threads}")
    need(cfg.rollout.chunk_steps >= 1, f"rollout.chunk_steps: must be >= 1, got {cfg.rollout.chunk_steps}")
    stages = cfg.rollout.pipeline_stages
    need(stages >= 1, f"rollout.pipeline_stages: must be >= 1, got {stages}")
    need(stages * cfg.cluster.num_env_workers <= max(cfg.env.num_envs, 1),
         f"rollout.pipeline_stages: {stages} stages x cluster.num_env_workers={cfg.cluster.num_env_workers} "
         f"exceeds env.num_envs={cfg.env.num_envs}; every stage needs an env")
    p += _algorithm_problems(cfg)
    need(cfg.actor.lr > 0, f"actor.lr: must be > 0, got {cfg.actor.lr}")
    need(0.0 <= cfg.actor.ema_decay < 1.0,
         f"actor.ema_decay: must be in [0, 1) (0: no average), got {cfg.actor.ema_decay}")
    need(not (cfg.actor.ema_decay and cfg.runner.mode == "async"),
         "actor.ema_decay: evals load the average into the rollout workers, which runner.mode=async keeps acting "
         "with; use runner.mode=sync")
    need(not (cfg.actor.ema_decay and cfg.actor.strategy == "fsdp" and cfg.actor.num_ranks > 1),
         "actor.ema_decay: not with actor.strategy=fsdp over several ranks (the average would be sharded); use ddp")
    p += _actor_rank_problems(cfg)
    seed = cfg.experiment.seed
    need(0 <= seed < 2**32, f"experiment.seed: must be in [0, 2**32) (numpy's seed range), got {seed}")
    r = cfg.runner
    need(r.iterations >= 1, f"runner.iterations: must be >= 1, got {r.iterations}")
    need(r.eval_every >= 0, f"runner.eval_every: must be >= 0, got {r.eval_every}")
    need(r.eval_episodes >= 1, f"runner.eval_episodes: must be >= 1, got {r.eval_episodes}")
    need(r.checkpoint_every >= 0, f"runner.checkpoint_every: must be >= 0, got {r.checkpoint_every}")
    need(r.keep_checkpoints >= 0, f"runner.keep_checkpoints: must be >= 0 (0 keeps all), got {r.keep_checkpoints}")
    p += _restart_problems(r)
    for i, extra in enumerate(r.extra_evals):
        p += extra.validate(f"runner.extra_evals[{i}]")
    names = [e.name or e.id for e in r.extra_evals]
    need(len(set(names)) == len(names), f"runner.extra_evals: two entries log under one name ({names}); give "
                                        f"runner.extra_evals[i].name to tell them apart")
    t = cfg.sft
    need(t.epochs >= 1, f"sft.epochs: must be >= 1, got {t.epochs}")
    need(t.batch_size >= 1, f"sft.batch_size: must be >= 1, got {t.batch_size}")
    need(t.lr > 0, f"sft.lr: must be > 0, got {t.lr}")
    need(t.weight_decay >= 0, f"sft.weight_decay: must be >= 0, got {t.weight_decay}")
    need(t.max_grad_norm > 0, f"sft.max_grad_norm: must be > 0, got {t.max_grad_norm}")
    need(0.0 <= t.val_fraction < 1.0, f"sft.val_fraction: must be in [0, 1), got {t.val_fraction}")
    need(t.first_step_weight > 0, f"sft.first_step_weight: must be > 0 (1: uniform), got {t.first_step_weight}")
    need(t.eval_every >= 0, f"sft.eval_every: must be >= 0, got {t.eval_every}")
    need(t.log_every >= 1, f"sft.log_every: must be >= 1, got {t.log_every}")
    need(t.frame_cache_mb >= 0, f"sft.frame_cache_mb: must be >= 0 (0: no cache), got {t.frame_cache_mb}")
    p += _sft_feature_problems(t.features)
    p += empty_paths("sft.dataset", t.dataset)
    v = cfg.logger.video
    need(v.fps >= 1, f"logger.video.fps: must be >= 1, got {v.fps}")
    need(v.size >= 16 and v.size % 2 == 0, f"logger.video.size: must be even and >= 16 (video codecs), got {v.size}")
    need(v.max_videos >= 1, f"logger.video.max_videos: must be >= 1, got {v.max_videos}")
    need(len(set(cfg.logger.backends)) == len(cfg.logger.backends),
         f"logger.backends: each backend at most once, got {cfg.logger.backends}")
    c = cfg.cluster
    need(not (c.placement == "colocated" and c.backend == "ray"),
         "cluster.placement: colocated needs cluster.backend=local (on Ray every worker is a process of its own; "
         "use disaggregated, or leave placement unset)")
    for group in ("env", "rollout", "actor"):
        res = getattr(c, f"{group}_resources")
        for field_name in ("num_cpus", "num_gpus"):
            value = getattr(res, field_name)
            need(math.isfinite(value) and value >= 0,
                 f"cluster.{group}_resources.{field_name}: must be a number >= 0, got {value}")
        for name, value in res.resources.items():
            need(isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
                 f"cluster.{group}_resources.resources.{name}: must be a number > 0, got {value!r}")
        need(res.group_strategy is None or c.backend == "ray",
             f"cluster.{group}_resources.group_strategy: placement groups are Ray's; cluster.backend is {c.backend!r}")
        need(res.group_strategy is None or res.num_cpus > 0 or res.num_gpus > 0 or bool(res.resources),
             f"cluster.{group}_resources.group_strategy: {res.group_strategy} needs something to place: set num_cpus, "
             f"num_gpus or resources of cluster.{group}_resources (a placement group's bundles cannot be empty)")
    need(cfg.cluster.address is None or cfg.cluster.backend == "ray",
         f"cluster.address: only used with cluster.backend=ray, got backend={cfg.cluster.backend!r}")
    named = {problem.split(":")[0] for problem in p}
    return p + [problem for problem in _non_finite(cfg) if problem.split(":")[0] not in named]

"""What a typed config can still get wrong: ranges, names and combinations that types alone cannot
catch, each problem prefixed by its field path (``validate``). ``loader.load_config`` reports them all
at once, before any worker starts. Each section checks its own fields (``validate()`` of its dataclass,
``embodied.config.sections``; the policy's and the algorithm's of their configs); here are the checks of fields
against each other's. What an algorithm needs of the engine it declares (``embodied.config.algorithm``), and is
checked here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from embodied.config.algorithm import OffPolicyConfig, OnPolicyConfig, whole_episode_problems
from embodied.config.schema import Config


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
    if not a.lr > 0:
        problems.append(f"algorithm.lr: Adam's learning rate must be > 0, got {a.lr}")
    return problems + a.validate(cfg)


def _actor_rank_problems(cfg: Config) -> list[str]:
    """``actor.num_ranks`` / ``grad_accumulation_steps`` / ``dist_backend`` against the backend and the batch."""
    a, c = cfg.actor, cfg.cluster
    if a.num_ranks < 1 or a.grad_accumulation_steps < 1:
        return []  # ActorConfig.validate names it
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


def validate(cfg: Config) -> list[str]:
    """Problems that types alone cannot catch, each prefixed by its field path: each section's own
    (``validate()`` of its dataclass), then what no one section can see."""
    p: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            p.append(msg)

    # eval_env fields left null inherit env's and are checked there, so each problem is named once.
    for section in (cfg.experiment, cfg.env, cfg.eval_env, cfg.cluster, cfg.rollout, cfg.actor, cfg.runner, cfg.sft,
                    cfg.logger):
        p += section.validate() if section is not None else []
    need(cfg.policy.action_chunk >= 1, f"policy.action_chunk: chunk size must be >= 1, got {cfg.policy.action_chunk}")
    # `policy.init_from=$RUN` with $RUN unset would otherwise train from scratch without a word.
    need(cfg.policy.init_from is None or cfg.policy.init_from.strip() != "",
         "policy.init_from: an empty path (an unset shell variable?); leave it out or set it to null to start without "
         "one")
    p += cfg.policy.validate()
    p += _obs_mode_problems(cfg)
    for name, ranks in (("num_env_workers", cfg.cluster.num_env_workers),
                        ("num_rollout_workers", cfg.cluster.num_rollout_workers)):
        need(ranks <= max(cfg.env.num_envs, 1),
             f"cluster.{name}: {ranks} ranks for env.num_envs={cfg.env.num_envs}; every rank needs an env")
        eval_envs = cfg.eval_env.num_envs
        need(eval_envs is None or ranks <= max(eval_envs, 1),
             f"cluster.{name}: {ranks} ranks for eval_env.num_envs={eval_envs}; every rank needs an eval env")
    stages = cfg.rollout.pipeline_stages
    need(stages * cfg.cluster.num_env_workers <= max(cfg.env.num_envs, 1),
         f"rollout.pipeline_stages: {stages} stages x cluster.num_env_workers={cfg.cluster.num_env_workers} "
         f"exceeds env.num_envs={cfg.env.num_envs}; every stage needs an env")
    p += _algorithm_problems(cfg)
    need(not (cfg.actor.ema_decay and cfg.runner.mode == "async"),
         "actor.ema_decay: evals load the average into the rollout workers, which runner.mode=async keeps acting "
         "with; use runner.mode=sync")
    need(not (cfg.actor.ema_decay and cfg.actor.strategy == "fsdp" and cfg.actor.num_ranks > 1),
         "actor.ema_decay: not with actor.strategy=fsdp over several ranks (the average would be sharded); use ddp")
    p += _actor_rank_problems(cfg)
    named = {problem.split(":")[0] for problem in p}
    return p + [problem for problem in _non_finite(cfg) if problem.split(":")[0] not in named]

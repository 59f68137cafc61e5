"""What a typed config can still get wrong: ranges, names and combinations that types alone cannot
catch, each problem prefixed by its field path (``validate``). ``loader.load_config`` reports them all
at once, before any worker starts; ``whole_episode_problems`` is also asked by the runner once the
env's own episode cap is known.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from embodied.config.schema import Config, RunnerConfig
from embodied.registry import ALGORITHMS, ENVS, UnknownNameError


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
    """The algorithm's name, and what GRPO needs of the envs and the rollout."""
    a, problems = cfg.algorithm, []
    try:
        ALGORITHMS.entry_point(a.name)
    except UnknownNameError as exc:
        return [f"algorithm.name: {exc}"]
    if a.max_staleness < 0:
        problems.append(f"algorithm.max_staleness: must be >= 0 (weight versions; 0 is synchronous), got "
                        f"{a.max_staleness}")
    if cfg.runner.mode == "async" and a.name != "ppo":
        problems.append(f"runner.mode: async trains on data of older weight versions, which only algorithm.name=ppo "
                        f"corrects for (decoupled PPO); {a.name!r} cannot use off-policy data")
    if cfg.runner.mode == "async" and cfg.cluster.placement == "colocated":
        problems.append("cluster.placement: colocated rollout workers act with the actor's own module, which "
                        "runner.mode=async trains while they act; use disaggregated (or leave it unset)")
    if a.critic_warmup_iterations < 0:
        problems.append(f"algorithm.critic_warmup_iterations: must be >= 0, got {a.critic_warmup_iterations}")
    for name in ("clip_coef_low", "clip_coef_high"):
        value = getattr(a, name)
        if value is not None and not value > 0:
            problems.append(f"algorithm.{name}: must be > 0, got {value}")
    if a.name in ("sac", "dsrl"):  # dsrl is SAC over a frozen flow policy's noise
        problems += _sac_problems(cfg)
    if a.name == "dsrl":
        problems += _dsrl_problems(cfg)
    elif a.name != "sac" and a.demos is not None:  # RLPD's demo replay lives in the off-policy actor
        problems.append(f"algorithm.demos: demonstrations fill SAC's second replay (RLPD); algorithm.name={a.name} "
                        f"does not read them (behaviour cloning is `embodied sft`); use algorithm.name=sac or unset it")
    if a.name != "sac" and a.n_step != 1:
        problems.append(f"algorithm.n_step: n-step returns over chunks are SAC's (PPO's and GRPO's returns are "
                        f"GAE's); algorithm.name={a.name} needs 1, got {a.n_step}")
    if a.name != "grpo":
        return problems
    if a.group_size < 2:
        problems.append(f"algorithm.group_size: GRPO compares envs within a group, so >= 2, got {a.group_size}")
    elif cfg.env.num_envs % a.group_size:
        problems.append(f"algorithm.group_size: env.num_envs={cfg.env.num_envs} is not a multiple of "
                        f"group_size={a.group_size}")
    if cfg.env.auto_reset:
        problems.append("env.auto_reset: GRPO runs one episode per env per iteration; set env.auto_reset=false")
    if cfg.env.max_episode_steps is not None:  # else against the env's own cap, before any worker starts (runner)
        problems += whole_episode_problems(cfg, cfg.env.max_episode_steps)
    return problems


def _sac_problems(cfg: Config) -> list[str]:
    """SAC's replay, pacing and critic ensemble, and what it cannot run with yet."""
    a, p = cfg.algorithm, []
    if not a.utd_ratio > 0:
        p.append(f"algorithm.utd_ratio: gradient updates per chunk transition received must be > 0, got {a.utd_ratio}")
    if a.batch_size < 1:
        p.append(f"algorithm.batch_size: must be >= 1, got {a.batch_size}")
    elif a.replay_capacity < a.batch_size:
        p.append(f"algorithm.replay_capacity: {a.replay_capacity} is below one batch (algorithm.batch_size="
                 f"{a.batch_size})")
    if a.critic_subset < 1 or a.critic_subset > a.num_critics:
        p.append(f"algorithm.critic_subset: the target's min is over 1 to num_critics={a.num_critics} critics, "
                 f"got {a.critic_subset}")
    if a.critic_subset >= 2 and a.num_critics < 2:
        p.append(f"algorithm.num_critics: a min over a subset of {a.critic_subset} critics needs num_critics >= 2, "
                 f"got {a.num_critics}")
    if a.num_critics < 1:
        p.append(f"algorithm.num_critics: must be >= 1, got {a.num_critics}")
    if not 0 < a.tau <= 1:
        p.append(f"algorithm.tau: the polyak rate must be in (0, 1], got {a.tau}")
    if a.n_step < 1:
        p.append(f"algorithm.n_step: chunk transitions per TD target must be >= 1, got {a.n_step}")
    if a.sync_every < 1:
        p.append(f"algorithm.sync_every: must be >= 1 gradient update, got {a.sync_every}")
    if a.learning_starts < 0:
        p.append(f"algorithm.learning_starts: must be >= 0, got {a.learning_starts}")
    if not a.init_alpha > 0:
        p.append(f"algorithm.init_alpha: the temperature must be > 0, got {a.init_alpha}")
    if a.critic_lr is not None and not a.critic_lr > 0:
        p.append(f"algorithm.critic_lr: must be > 0 (null: actor.lr), got {a.critic_lr}")
    if a.image_shift < 0:
        p.append(f"algorithm.image_shift: the random shift's pixels must be >= 0 (0 disables it), got {a.image_shift}")
    if cfg.runner.mode != "sync":
        p.append(f"runner.mode: algorithm.name={a.name} runs its own loop (embodied.offpolicy_runner); leave "
                 f"runner.mode=sync, got {cfg.runner.mode}")
    if a.overlap and cfg.cluster.placement == "colocated":
        p.append("cluster.placement: colocated rollout workers act with the actor's own module, which "
                 "algorithm.overlap trains while they act; use disaggregated (or leave it unset), or "
                 "algorithm.overlap=false")
    if cfg.actor.strategy == "fsdp":
        p.append(f"actor.strategy: algorithm.name={a.name} keeps its small actor, critics and temperature whole on "
                 f"every actor rank and all-reduces their gradients (ddp); fsdp is not supported, use ddp")
    if cfg.actor.num_ranks > 1 and a.batch_size % cfg.actor.num_ranks:
        p.append(f"algorithm.batch_size: each of actor.num_ranks={cfg.actor.num_ranks} ranks draws an equal share of "
                 f"every batch from its own replay, so batch_size must be a multiple of it, got {a.batch_size}")
    if cfg.actor.ema_decay > 0:
        p.append(f"actor.ema_decay: algorithm.name={a.name} keeps polyak target critics, not a weight average; "
                 f"set 0, got {cfg.actor.ema_decay}")
    if not 0.0 <= a.demo_ratio <= 1.0:
        p.append(f"algorithm.demo_ratio: the share of a batch drawn from demonstrations must be in [0, 1], "
                 f"got {a.demo_ratio}")
    if a.awr_temperature is not None and not a.awr_temperature > 0:
        p.append(f"algorithm.awr_temperature: the advantage weights' temperature must be > 0 (null: SAC's actor), "
                 f"got {a.awr_temperature}")
    if a.bc_weight < 0:
        p.append(f"algorithm.bc_weight: the behaviour-cloning term's weight must be >= 0 (0: off), got {a.bc_weight}")
    elif a.bc_weight > 0 and (a.demos is None or a.demo_ratio == 0):
        p.append(f"algorithm.bc_weight: the behaviour-cloning term is computed on the batch's demonstration rows, and "
                 f"there are none (algorithm.demos={a.demos}, algorithm.demo_ratio={a.demo_ratio}); set both, or "
                 f"bc_weight=0")
    if a.demos is not None and a.demos.strip() == "":
        p.append("algorithm.demos: an empty path (an unset shell variable?); leave it out or set it to null")
    return p


def _dsrl_problems(cfg: Config) -> list[str]:
    """DSRL's frozen flow policy, its noise actor, and what it cannot take."""
    a, p = cfg.algorithm, []
    if not cfg.policy.flow_noise():
        p.append(f"policy.type: algorithm.name=dsrl steers the initial noise of a flow-matching policy, and "
                 f"policy.type={cfg.policy.type} as configured starts from none (a VLA needs "
                 f"policy.action_head=flow; policy.type=pi0 has one)")
    if not a.noise_scale > 0:
        p.append(f"algorithm.noise_scale: the noise actor's bound tanh(u) * noise_scale must be > 0, got "
                 f"{a.noise_scale}")
    for name in ("noise_actor_hidden_sizes", "noise_critic_hidden_sizes"):
        sizes = getattr(a, name)
        if not sizes or any(v < 1 for v in sizes):
            p.append(f"algorithm.{name}: need at least one layer, every width >= 1, got {sizes}")
    if a.dsrl_features == "states":
        for section, mode in (("env", cfg.env.obs_mode), ("eval_env", cfg.eval_env.obs_mode)):
            if mode is not None and "states" not in OBS_MODE_GIVES[mode]:
                p.append(f"algorithm.dsrl_features: 'states' needs states, which {section}.obs_mode={mode!r} does "
                         f"not give; use 'state+rgb' or algorithm.dsrl_features=encoding")
    if a.demos is not None:
        p.append("algorithm.demos: demonstrations hold env chunks, but DSRL's actions are the frozen policy's initial "
                 "noise, which a chunk does not give (RLPD is algorithm.name=sac); unset it")
    return p


def whole_episode_problems(cfg: Config, episode_steps: int) -> list[str]:
    """GRPO runs whole episodes: a rollout's chunk steps must cover ``episode_steps`` sub-steps (the env's cap)."""
    covered = cfg.rollout.chunk_steps * cfg.policy.action_chunk
    if cfg.algorithm.name != "grpo" or covered >= episode_steps:
        return []
    return [f"rollout.chunk_steps: GRPO needs whole episodes, but {cfg.rollout.chunk_steps} chunk steps x "
            f"policy.action_chunk={cfg.policy.action_chunk} = {covered} sub-steps < env.max_episode_steps="
            f"{episode_steps}" + (" (the env's own cap: env.max_episode_steps is not set)"
                                  if cfg.env.max_episode_steps is None else "")]


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
    parts = a.num_ranks * a.grad_accumulation_steps
    if parts > 1 and not p and cfg.algorithm.name != "sac":  # sac splits its replay batches (_sac_problems)
        rows = cfg.env.num_envs * cfg.rollout.chunk_steps  # chunk steps in one rollout epoch
        per_minibatch, rest = divmod(rows, cfg.algorithm.num_minibatches)
        if rest or per_minibatch % parts:
            p.append(f"actor.num_ranks / actor.grad_accumulation_steps: a minibatch of env.num_envs * "
                     f"rollout.chunk_steps / algorithm.num_minibatches = {rows} / {cfg.algorithm.num_minibatches} "
                     f"chunk steps does not split into {a.num_ranks} ranks x {a.grad_accumulation_steps} micro-batches "
                     "of equal size")
        if cfg.algorithm.name == "grpo" and a.num_ranks > 1 and (cfg.env.num_envs // c.num_rollout_workers) % \
                cfg.algorithm.group_size:
            p.append(f"algorithm.group_size: with actor.num_ranks={a.num_ranks}, a GRPO group must sit on one rollout "
                     f"rank (its advantages are computed where its trajectories go), but env.num_envs / "
                     f"cluster.num_rollout_workers = {cfg.env.num_envs // c.num_rollout_workers} envs per rank is not "
                     f"a multiple of group_size={cfg.algorithm.group_size}")
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
            if env.id is not None:
                ENVS.entry_point(env.id)
        except UnknownNameError as exc:
            p.append(f"{section}.id: {exc}")
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
    a = cfg.algorithm
    p += _algorithm_problems(cfg)
    need(0.0 < a.gamma <= 1.0, f"algorithm.gamma: must be in (0, 1], got {a.gamma}")
    need(0.0 <= a.gae_lambda <= 1.0, f"algorithm.gae_lambda: must be in [0, 1], got {a.gae_lambda}")
    need(a.clip_coef > 0, f"algorithm.clip_coef: must be > 0, got {a.clip_coef}")
    need(a.update_epochs >= 1, f"algorithm.update_epochs: must be >= 1, got {a.update_epochs}")
    batch = cfg.env.num_envs * cfg.rollout.chunk_steps
    need(1 <= a.num_minibatches <= batch,
         f"algorithm.num_minibatches: must be in [1, env.num_envs * rollout.chunk_steps = {batch}], "
         f"got {a.num_minibatches}")
    need(a.max_grad_norm > 0, f"algorithm.max_grad_norm: must be > 0, got {a.max_grad_norm}")
    need(a.reward_scale > 0, f"algorithm.reward_scale: must be > 0, got {a.reward_scale}")
    need(a.target_kl is None or a.target_kl > 0, f"algorithm.target_kl: must be > 0 (or null), got {a.target_kl}")
    need(a.vf_coef >= 0, f"algorithm.vf_coef: must be >= 0, got {a.vf_coef}")
    need(a.ent_coef >= 0, f"algorithm.ent_coef: must be >= 0, got {a.ent_coef}")
    need(cfg.actor.lr > 0, f"actor.lr: must be > 0, got {cfg.actor.lr}")
    need(cfg.actor.adam_eps > 0, f"actor.adam_eps: must be > 0, got {cfg.actor.adam_eps}")
    need(cfg.actor.lr_warmup_iterations >= 0,
         f"actor.lr_warmup_iterations: must be >= 0 (0: no warmup), got {cfg.actor.lr_warmup_iterations}")
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
        need(res.placement is None or c.backend == "ray",
             f"cluster.{group}_resources.placement: placement groups are Ray's; cluster.backend is {c.backend!r}")
        need(res.placement is None or res.num_cpus > 0 or res.num_gpus > 0 or bool(res.resources),
             f"cluster.{group}_resources.placement: {res.placement} needs something to place: set num_cpus, "
             f"num_gpus or resources of cluster.{group}_resources (a placement group's bundles cannot be empty)")
    need(cfg.cluster.address is None or cfg.cluster.backend == "ray",
         f"cluster.address: only used with cluster.backend=ray, got backend={cfg.cluster.backend!r}")
    named = {problem.split(":")[0] for problem in p}
    return p + [problem for problem in _non_finite(cfg) if problem.split(":")[0] not in named]

"""Env steps per second of the framework's rollout path, and of raw gymnasium vector envs.

"framework" times ``Workers.rollout`` (env workers stepping their envs, rollout workers acting,
shards travelling through the channels) after one warm-up epoch; with the random policy the
figure is the engine's overhead on top of the simulator. "raw" steps the same task in a
gymnasium ``SyncVectorEnv`` or ``AsyncVectorEnv`` with one batched random action per step. Both
count sub-steps that really ran. "native" is the simulator's own limit: the env's ``physics_limit``
(the built-in tasks: ``mujoco.rollout`` of the same model, worlds and physics steps per chunk on
every core, no Python between steps). Memory is the resident set of this process and all its child
processes (Ray's daemons and workers included) at the end of the timed part.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from embodied.config.schema import default_env_id

TASK = default_env_id()  # the default recipe's task


@dataclass
class Rate:
    """One timed path."""

    name: str
    env_steps: int
    seconds: float
    memory_mib: float = float("nan")

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.seconds


def tree_memory_mib() -> float:
    """Resident memory of this process and its descendants, MiB."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # gone meanwhile
            pass
    return total / 2**20


def framework_overrides(num_envs: int, chunk: int, backend: str, chunk_steps: int, max_episode_steps: int,
                        seed: int, stages: int = 1, obs_mode: str = "state", env_workers: int = 1,
                        task: str = TASK) -> list[str]:
    """The config of a rollout-only run of ``task`` with the random policy."""
    return [
        f"env.id={task}", f"env.num_envs={num_envs}", f"env.obs_mode={obs_mode}",
        f"env.max_episode_steps={max_episode_steps}", "env.preflight=false", f"eval_env.num_envs={env_workers}",
        "policy.type=random", f"policy.action_chunk={chunk}", f"rollout.chunk_steps={chunk_steps}",
        "algorithm.num_minibatches=1", f"cluster.backend={backend}", f"cluster.num_env_workers={env_workers}",
        f"experiment.seed={seed}", "logger.backends=[console]", f"rollout.pipeline_stages={stages}",
    ]


def framework_rate(num_envs: int, chunk: int, steps: int, backend_name: str, chunk_steps: int,
                   max_episode_steps: int, seed: int, stages: int = 1, obs_mode: str = "state",
                   env_workers: int = 1, extra: list[str] | None = None, task: str = TASK) -> Rate:
    """Env steps/s of ``Workers.rollout``, timed after one warm-up epoch (random policy unless ``extra``
    overrides ``policy.*``)."""
    from embodied.bench.random_policy import register_random_policy
    from embodied.config import load_config
    from embodied.backends import make_backend
    from embodied.workers.group import Workers

    register_random_policy()
    cfg = load_config(None, [*framework_overrides(num_envs, chunk, backend_name, chunk_steps, max_episode_steps, seed,
                                                  stages, obs_mode, env_workers, task), *(extra or [])])
    backend = make_backend(cfg.cluster)
    try:
        workers = Workers.start(cfg, backend)
        try:
            workers.sync_weights()
            workers.rollout(chunk_steps)  # warm-up: first obs through the channels, caches, threads
            done, seconds = 0, 0.0
            while done < steps:
                t0 = time.perf_counter()
                trajectories = workers.rollout(chunk_steps)
                seconds += time.perf_counter() - t0
                done += sum(t.num_env_steps for t in trajectories)
            memory = tree_memory_mib()
        finally:
            workers.close()
    finally:
        backend.shutdown()
    name = f"framework {backend_name} E={env_workers}" + (f" {stages} stages" if stages > 1 else "")
    return Rate(name, done, seconds, memory)


def raw_rate(num_envs: int, steps: int, max_episode_steps: int, seed: int, obs_mode: str = "state",
             kind: str = "sync", task: str = TASK) -> Rate:
    """Env steps/s of a gymnasium ``SyncVectorEnv`` (``kind="sync"``) or ``AsyncVectorEnv`` (one process
    per env) of the task, with batched random actions."""
    import functools

    import gymnasium as gym

    from embodied.core.registry import ENVS

    make = functools.partial(ENVS.resolve(task), obs_mode=obs_mode, max_episode_steps=max_episode_steps)
    vector = gym.vector.SyncVectorEnv if kind == "sync" else gym.vector.AsyncVectorEnv
    # SAME_STEP autoreset: every step() call is a real step of every env, as in the framework.
    options = {} if kind == "sync" else {"context": "spawn"}  # fork is unsafe after Ray or GL threads started
    envs = vector([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, **options)
    try:
        envs.reset(seed=seed)
        envs.action_space.seed(seed)
        for _ in range(max(1, math.ceil(steps / num_envs / 10))):  # warm-up
            envs.step(envs.action_space.sample())
        vector_steps = math.ceil(steps / num_envs)
        t0 = time.perf_counter()
        for _ in range(vector_steps):
            envs.step(envs.action_space.sample())
        seconds = time.perf_counter() - t0
        memory = tree_memory_mib()
    finally:
        envs.close()
    name = f"raw gymnasium {'SyncVectorEnv' if kind == 'sync' else 'AsyncVectorEnv'}"
    return Rate(name, vector_steps * num_envs, seconds, memory)


def native_rate(num_envs: int, chunk: int, steps: int, task: str = TASK) -> Rate | None:
    """The simulator's own limit for ``task``: its env class's ``physics_limit(num_envs, chunk, steps)``
    (env steps and seconds of native stepping alone), or None when the class offers none."""
    from embodied.core.registry import ENVS

    limit = getattr(ENVS.resolve(task), "physics_limit", None)
    if limit is None:
        return None
    env_steps, seconds = limit(num_envs, chunk, steps)
    return Rate("native physics limit", env_steps, seconds, tree_memory_mib())

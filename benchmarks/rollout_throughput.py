"""Rollout throughput: env steps per second of the framework's rollout path beside raw gymnasium.

    python benchmarks/rollout_throughput.py --num-envs 32 --chunk 8 --steps 20000 --backend local

"framework" times ``Workers.rollout`` (env workers stepping a ``ChunkedVectorEnv`` of ``Reach-v0``,
rollout workers acting, shards travelling through the channels) with a random policy, so the
figure is the engine's overhead on top of the simulator, not a model's inference time. "raw"
steps the same task in a ``gymnasium.vector.SyncVectorEnv`` with one batched random action per
step. Both count sub-steps that really ran (env steps) and both run after a warm-up.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

if __name__ == "__main__" and not __package__:
    # Run as a script: make the repository root importable, so that the random policy's lazy
    # entry point ``benchmarks.rollout_throughput:RandomPolicy`` resolves (also in Ray workers).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from embodied.policy import Policy, PolicyConfig, PolicySpec  # noqa: E402
from embodied.types import TASK_DESCRIPTIONS, Obs, PolicyOutput  # noqa: E402

MODULE = "benchmarks.rollout_throughput"  # the importable name of this file


@dataclass
class RandomConfig(PolicyConfig):
    """A policy that samples uniform actions: measures the engine, not a model."""

    type: str = "random"  # registered at run time by ``register_random_policy``
    seed: int = 0  # seed of the action sampler

    model_class: ClassVar[str] = f"{MODULE}:RandomPolicy"


class RandomPolicy(Policy):
    """Uniform actions within the env's bounds; log-probs are the uniform density, values 0."""

    def __init__(self, config: RandomConfig, spec: PolicySpec) -> None:
        super().__init__()
        self.chunk, self.action_dim = config.action_chunk, spec.action_dim
        self.register_buffer("low", torch.tensor(spec.action_low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(spec.action_high, dtype=torch.float32))
        self.unused = nn.Parameter(torch.zeros(1))  # the actor's optimizer needs a parameter
        self.generator = torch.Generator().manual_seed(config.seed)

    def _logprob(self, batch: int) -> torch.Tensor:
        return torch.full((batch,), -float(torch.log(self.high - self.low).sum()) * self.chunk) + 0 * self.unused

    def act(self, obs: Obs, deterministic: bool = False) -> PolicyOutput:
        batch = len(obs[TASK_DESCRIPTIONS])
        shape = (batch, self.chunk, self.action_dim)
        if deterministic:
            actions = ((self.low + self.high) / 2).expand(shape).clone()
        else:
            actions = self.low + (self.high - self.low) * torch.rand(shape, generator=self.generator)
        return PolicyOutput(actions, self._logprob(batch).detach(), torch.zeros(batch), {})

    def forward_inputs(self, obs: Obs) -> dict[str, torch.Tensor]:
        return {}

    def evaluate(self, forward_inputs: dict[str, torch.Tensor], actions: torch.Tensor):
        batch = actions.shape[0]
        return self._logprob(batch), torch.zeros(batch) + 0 * self.unused, torch.zeros(batch) + 0 * self.unused

    def value(self, obs: Obs) -> torch.Tensor:
        return torch.zeros(len(obs[TASK_DESCRIPTIONS]))


def register_random_policy() -> None:
    """Make ``policy.type=random`` known (the registry takes the config class object itself)."""
    from embodied.registry import POLICIES

    POLICIES.register("random", RandomConfig, overwrite=True)


@dataclass
class Rate:
    name: str
    env_steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.seconds


def framework_rate(num_envs: int, chunk: int, steps: int, backend_name: str, chunk_steps: int,
                   max_episode_steps: int, seed: int, stages: int = 1) -> Rate:
    """Env steps/s of ``Workers.rollout`` with the random policy, timed after one warm-up epoch."""
    from embodied.config import load_config
    from embodied.placement import make_backend
    from embodied.workers.group import Workers

    register_random_policy()
    cfg = load_config(None, [
        "env.id=Reach-v0", f"env.num_envs={num_envs}", "env.obs_mode=state", f"env.max_episode_steps={max_episode_steps}",
        "eval_env.num_envs=1", "policy.type=random", f"policy.action_chunk={chunk}",
        f"rollout.chunk_steps={chunk_steps}", "algorithm.num_minibatches=1", f"cluster.backend={backend_name}",
        f"experiment.seed={seed}", "logger.backends=[console]", f"rollout.pipeline_stages={stages}",
    ])
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
        finally:
            workers.close()
    finally:
        backend.shutdown()
    return Rate(f"framework ({backend_name}, {stages} stage{'s' if stages > 1 else ''})", done, seconds)


def raw_rate(num_envs: int, steps: int, max_episode_steps: int, seed: int) -> Rate:
    """Env steps/s of a gymnasium ``SyncVectorEnv`` of ``ReachEnv`` with batched random actions."""
    import gymnasium as gym

    from embodied.envs.reach import ReachEnv

    def make() -> gym.Env:
        return ReachEnv(obs_mode="state", max_episode_steps=max_episode_steps)

    # SAME_STEP autoreset: every step() call is a real step of every env, as in the framework.
    envs = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
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
    finally:
        envs.close()
    return Rate("raw gymnasium SyncVectorEnv", vector_steps * num_envs, seconds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=32, help="parallel envs (N)")
    p.add_argument("--chunk", type=int, default=8, help="policy.action_chunk (C)")
    p.add_argument("--steps", type=int, default=20000, help="env steps to time on each path (after warm-up)")
    p.add_argument("--backend", choices=["local", "ray"], default="local", help="cluster.backend of the framework")
    p.add_argument("--chunk-steps", type=int, default=16, help="rollout.chunk_steps: chunk steps per rollout epoch")
    p.add_argument("--max-episode-steps", type=int, default=50, help="env.max_episode_steps")
    p.add_argument("--stages", type=int, default=1, help="rollout.pipeline_stages")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("num_envs", "chunk", "steps", "chunk_steps", "max_episode_steps", "stages"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run both paths, print a table, return the rates (env steps/s) and their ratio."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    # No more chunk steps per epoch than the whole budget needs (small runs stay small).
    chunk_steps = min(args.chunk_steps, math.ceil(args.steps / (args.num_envs * args.chunk)))
    fw = framework_rate(args.num_envs, args.chunk, args.steps, args.backend, chunk_steps, args.max_episode_steps,
                        args.seed, args.stages)
    raw = raw_rate(args.num_envs, fw.env_steps, args.max_episode_steps, args.seed)
    ratio = fw.steps_per_s / raw.steps_per_s
    print(f"Reach-v0, state obs, {args.num_envs} envs, action chunk {args.chunk}, "
          f"{chunk_steps} chunk steps per rollout epoch, random actions")
    print(f"{'path':32s} {'env steps':>10s} {'seconds':>9s} {'env steps/s':>12s}")
    for rate in (fw, raw):
        print(f"{rate.name:32s} {rate.env_steps:10d} {rate.seconds:9.3f} {rate.steps_per_s:12.0f}")
    print(f"{'framework / raw':32s} {'':10s} {'':9s} {ratio:12.3f}")
    return {"framework": fw.steps_per_s, "raw": raw.steps_per_s, "ratio": ratio}


if __name__ == "__main__":
    if not __package__:
        # Use the importable module's classes, so the registered config and its lazy
        # ``model_class`` entry point name the same module (and Ray workers can import it).
        from benchmarks.rollout_throughput import main as _main

        _main()
    else:
        main()

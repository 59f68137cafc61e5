"""The training loop, top to bottom.

One iteration: sync weights (actor -> rollout) · rollout epoch (env and rollout workers trade
shards for ``rollout.chunk_steps`` chunk steps) · PPO update · log · maybe eval / checkpoint.

    from embodied.config import load_config
    from embodied.runner import train
    result = train(load_config("configs/reach_mlp_ppo.yaml", ["runner.iterations=10"]))
    print(result.final_eval["eval/success_rate"])
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
import yaml

from embodied.checkpoint import save_checkpoint
from embodied.config import Config, to_dict
from embodied.logger import MetricLogger
from embodied.placement import make_backend
from embodied.types import EpisodeStats
from embodied.workers.group import Workers


@dataclass
class TrainResult:
    """What a finished run leaves behind."""

    run_dir: Path
    final_eval: dict[str, float]
    checkpoint: Path
    history: list[dict[str, float]] = field(default_factory=list)  # the metrics of every iteration


def train(cfg: Config) -> TrainResult:
    """Train ``cfg`` to completion; every worker is stopped on the way out, also on error."""
    run_dir = make_run_dir(cfg)
    seed_everything(cfg.experiment.seed)
    backend = make_backend(cfg.cluster)
    logger: MetricLogger | None = None
    try:
        workers = Workers.start(cfg, backend)
        logger = MetricLogger(cfg.logger, run_dir, run_dir.name, to_dict(cfg), cfg.runner.iterations)
        history, env_steps, last = [], 0, cfg.runner.iterations
        for it in range(1, last + 1):
            t0 = time.perf_counter()
            workers.sync_weights()
            trajectories = workers.rollout(cfg.rollout.chunk_steps)
            t1 = time.perf_counter()
            metrics = workers.update(trajectories, it)
            t2 = time.perf_counter()
            steps = sum(t.num_env_steps for t in trajectories)
            env_steps += steps
            metrics |= episode_metrics("env", [e for t in trajectories for e in t.episodes])
            metrics |= {"time/rollout": t1 - t0, "time/update": t2 - t1, "env_steps_per_s": steps / (t1 - t0),
                        "env_steps": env_steps}
            if it == last or (cfg.runner.eval_every and it % cfg.runner.eval_every == 0):
                workers.sync_weights()  # evaluate the weights just trained
                metrics |= episode_metrics("eval", workers.evaluate(cfg.runner.eval_episodes))
            logger.log(metrics, step=it)
            history.append(metrics)
            if it == last or (cfg.runner.checkpoint_every and it % cfg.runner.checkpoint_every == 0):
                checkpoint = save_checkpoint(run_dir / "checkpoints" / f"iter_{it:06d}.pt", {
                    "iteration": it, "env_steps": env_steps, "actor": workers.actor_state(), "config": to_dict(cfg),
                })
        workers.close()
        final_eval = {k: v for k, v in history[-1].items() if k.startswith("eval/")}
        return TrainResult(run_dir, final_eval, checkpoint, history)
    finally:
        if logger is not None:
            logger.close()
        backend.shutdown()


def episode_metrics(prefix: str, episodes: list[EpisodeStats]) -> dict[str, float]:
    """Success rate, mean return and length of finished episodes (NaN when none finished)."""
    if not episodes:
        return {f"{prefix}/success_rate": float("nan"), f"{prefix}/return": float("nan"),
                f"{prefix}/episode_len": float("nan"), f"{prefix}/episodes": 0.0}
    return {
        f"{prefix}/success_rate": float(np.mean([e.success_once for e in episodes])),
        f"{prefix}/return": float(np.mean([e.episode_return for e in episodes])),
        f"{prefix}/episode_len": float(np.mean([e.length for e in episodes])),
        f"{prefix}/episodes": float(len(episodes)),
    }


def make_run_dir(cfg: Config) -> Path:
    """``<output_dir>/<name>-<timestamp>`` with the resolved config saved in it."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(cfg.experiment.output_dir) / f"{cfg.experiment.name}-{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = Path(cfg.experiment.output_dir) / f"{cfg.experiment.name}-{stamp}-{suffix}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return run_dir


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

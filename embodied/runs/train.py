"""The training loop, top to bottom.

One iteration: sync weights (actor -> rollout) · rollout epoch (env and rollout workers trade
shards for ``rollout.chunk_steps`` chunk steps) · PPO update · log · maybe eval / checkpoint.
At the end: the last videos, ``learning_curves.png``.

    from embodied.config import load_config
    from embodied.runs.train import train
    result = train(load_config("configs/reach_mlp_ppo.yaml", ["runner.iterations=10"]))
    print(result.final_eval["eval/success_rate"])

``runner.resume_from`` continues a run where a checkpoint left it (``embodied.runs.resume``).
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import yaml

from embodied.backends import ClusterLostError, WorkerLostError, make_backend, user_packages
from embodied.checkpoint.store import check_init_from, prune_checkpoints, remove_partial
from embodied.checkpoint.trust import signing_key
from embodied.config import Config, ConfigError, OffPolicyConfig, to_dict
from embodied.config.schema import due
from embodied.config.validate import whole_episode_problems
from embodied.core.atomic import DiskFullError
from embodied.env_runtime.factory import check_env_config, env_spec, episode_steps
from embodied.env_runtime.preflight import check_policy_fits, preflight_run
from embodied.evaluation.run import PeriodicEval
from embodied.evaluation.stats import episode_metrics
from embodied.logging.logger import MetricLogger
from embodied.logging.plot import plot_run
from embodied.policy.q_functions import require_q_functions
from embodied.replay.demos import fit_demos, open_demos
from embodied.runs.lock import RunLock
from embodied.runs.resume import (process_rng_state, restore_run, resume_point, resume_state, signed, wandb_id_of,
                                  with_resume_command)
from embodied.runs.stop import StopRequest
from embodied.workers.group import Workers
from embodied.workers.restarts import FaultStop


HISTORY_KEPT = 5_000  # iterations of metrics a run keeps in memory for TrainResult.history


@dataclass
class TrainResult:
    """What a finished run leaves behind."""

    run_dir: Path
    final_eval: dict[str, float]  # eval/* metrics of the last iteration ({} if it ran no iteration)
    checkpoint: Path | None  # the last checkpoint
    # The metrics of every iteration run; of a long run, the last HISTORY_KEPT to 2 x HISTORY_KEPT (metrics.jsonl
    # has them all).
    history: list[dict[str, float]] = field(default_factory=list)
    plot: Path | None = None  # learning_curves.png, if drawn
    interrupted: str | None = None  # the signal (SIGINT, SIGTERM) that stopped the run early, if any
    exit_code: int = 0  # 128 + that signal's number (the shell's convention), else 0
    discarded: int = 0  # async: rollouts produced but never trained on (in flight at the end), counted here


class Iterations(Protocol):
    """How a runner turns iteration numbers into trained iterations (``SyncIterations`` here, the
    overlapping producer/consumer of ``embodied.runs.async_iterations`` for ``runner.mode: async``)."""

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        """Train iteration ``it``: its metrics and the env sub-steps its rollout ran."""

    def pause(self) -> dict[str, Any]:
        """Let the workers come to rest (before a checkpoint); what the checkpoint should record."""

    def resume(self) -> None:
        """Go on after ``pause``."""

    def close(self) -> int:
        """Stop; how many rollouts were produced but never trained on."""


@dataclass
class SyncIterations:
    """Sync, rollout, update, in turn: nothing is in flight between iterations."""

    workers: Workers
    cfg: Config

    def __call__(self, it: int) -> tuple[dict[str, float], int]:
        return train_iteration(self.workers, self.cfg, it)

    def pause(self) -> dict[str, Any]:
        return {}

    def resume(self) -> None:
        pass

    def close(self) -> int:
        return 0


def train(cfg: Config) -> TrainResult:
    """Train ``cfg`` to completion (``runner.mode``: sync here, async in ``embodied.runs.async_iterations``; an off-policy
    algorithm in ``embodied.runs.offpolicy_iterations``);
    every worker is stopped on the way out, also on error."""
    if cfg.algorithm.off_policy:  # replay in the actor, updates paced to the UTD ratio
        from embodied.runs.offpolicy_iterations import OffPolicyIterations

        return run(cfg, OffPolicyIterations)
    if cfg.runner.mode == "async":
        from embodied.runs.async_iterations import AsyncIterations

        return run(cfg, AsyncIterations)
    return run(cfg, SyncIterations)


def run(cfg: Config, make_iterations: Callable[[Workers, Config], Iterations]) -> TrainResult:
    """The run around the iterations: checks, run dir, workers, resume, eval, logging, checkpoints."""
    check_before_start(cfg)
    resume = resume_point(cfg)
    signing_key()  # checkpoints sign their env snapshots: an unsafe key file fails here, before anything starts
    backend = make_backend(cfg.cluster, user_packages(cfg))  # joins cluster.address (or fails) before a run dir exists
    try:
        run_dir = resume.run_dir if resume else make_run_dir(cfg)
        lock = RunLock(run_dir).__enter__()  # one run at a time in a run dir (a second resume is refused)
    except BaseException:
        backend.shutdown()
        raise
    try:
        remove_partial(run_dir)  # temp folders of a checkpoint write that a killed run left
        save_config(cfg, run_dir)
    except BaseException:
        lock.__exit__(None, None, None)
        backend.shutdown()
        raise
    start, env_steps = (resume.iteration, resume.env_steps) if resume else (0, 0)
    checkpoint = resume.checkpoint if resume else None
    seed_everything(cfg.experiment.seed)
    logger: MetricLogger | None = None
    history: list[dict[str, float]] = []
    warned: set[str] = set()  # why exact resume is off, said once
    stop = StopRequest()
    discarded = 0
    try:
        stop.__enter__()  # SIGINT/SIGTERM: finish the iteration, checkpoint, stop (see embodied.runs.stop)
        try:
            workers = Workers.start(cfg, backend)
            if resume:
                restore_run(workers, resume, cfg)
        except Exception as exc:
            if backend.died(exc):  # a worker's process killed while building (an OOM kill, say): not Ray's traceback
                raise WorkerLostError(f"a worker's process died while the run was starting: {lost_worker(exc)}") \
                    from exc
            raise
        logger = MetricLogger(cfg.logger, run_dir, run_dir.name, to_dict(cfg), cfg.runner.iterations, start,
                              wandb_id_of(resume, run_dir))
        evaluate = PeriodicEval(workers, cfg, run_dir)
        last = cfg.runner.iterations
        iterations = make_iterations(workers, cfg)
        try:
            for it in range(start + 1, last + 1):
                rng = process_rng_state()  # the driver's RNG as iteration it - 1 left it
                try:
                    env_steps, checkpoint = iteration(it, iterations, workers, cfg, logger, evaluate, stop, warned,
                                                      run_dir, env_steps, checkpoint, history)
                except FaultStop as exc:  # nothing lost: the last completed iteration is checkpointed first
                    checkpoint = checkpoint_before(exc, it - 1, workers, cfg, logger, run_dir, env_steps, rng,
                                                   warned) or checkpoint
                    raise
                except (ClusterLostError, WorkerLostError):
                    raise
                except Exception as exc:
                    if backend.died(exc):  # a rollout worker's process (env workers are replaced on the way)
                        raise WorkerLostError(f"a worker's process died in iteration {it}: {lost_worker(exc)}; "
                                              f"the run cannot replace it") from exc
                    raise
                if stop.signal:
                    break
        finally:
            discarded = iterations.close()
        logger.log_videos(evaluate.videos(wait=True), step=max(last, start))  # the last eval's, once encoded
        evaluate.close()
        workers.close()
    except (ClusterLostError, WorkerLostError, FaultStop) as exc:
        raise with_resume_command(exc, checkpoint, run_dir) from None
    finally:
        stop.__exit__()
        if logger is not None:
            logger.close()
        backend.shutdown()
        lock.__exit__(None, None, None)
    final_eval = {k: v for k, v in history[-1].items() if k.startswith("eval/")} if history else {}
    plot = draw_learning_curves(run_dir) if cfg.runner.plot else None
    return TrainResult(run_dir, final_eval, checkpoint, history, plot, stop.signal, stop.exit_code, discarded)


def lost_worker(exc: BaseException) -> str:
    """The worker a backend's death error names (Ray's names the actor's class), and the error's type."""
    found = re.search(r"class_name: (\w+)", str(exc))
    return f"{found.group(1) if found else 'a worker'} ({type(exc).__name__})"


def check_before_start(cfg: Config) -> None:
    """What can fail before any worker starts or a run dir is made: the env configs, GRPO's whole episodes against the
    cap the envs will run (the env's own when the config sets none), check-env's fast checks on
    one env (``env.preflight``), and the ``policy.init_from`` checkpoint against the policy config; an algorithm
    that ``needs_q_functions`` needs a policy with them (``embodied.policy.q_functions``), and ``algorithm.demos`` must fit
    the env."""
    if cfg.algorithm.needs_q_functions:
        try:
            require_q_functions(cfg.algorithm.worker_policy(cfg.policy), cfg.algorithm.name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    check_env_config(cfg.env, "env")
    check_env_config(cfg.resolved_eval_env(), "eval_env")
    problems = whole_episode_problems(cfg, episode_steps(cfg.env))  # against the cap the envs will run
    if problems:
        raise ConfigError("; ".join(problems))
    if cfg.env.preflight:
        preflight_run(cfg, video=cfg.runner.eval_video != "none")
    check_policy_fits(cfg, cfg.env, "env")  # a pretrained model's dimensions and cameras against the env's
    if cfg.policy.init_from:
        try:
            check_init_from(cfg.policy.init_from, cfg.algorithm.trained_policy(cfg.policy))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    # RLPD: the demonstrations against one env's spec, before the actor reads them
    if isinstance(cfg.algorithm, OffPolicyConfig) and cfg.algorithm.demos:
        data = open_demos(cfg.algorithm.demos, cfg.policy.action_chunk)
        fit_demos(data, env_spec(cfg.env), cfg.policy.action_chunk)


def iteration(it: int, iterations: Iterations, workers: Workers, cfg: Config, logger: MetricLogger,
              evaluate: PeriodicEval, stop: StopRequest, warned: set[str], run_dir: Path, env_steps: int,
              checkpoint: Path | None, history: list[dict[str, float]]) -> tuple[int, Path | None]:
    """Train, eval, log and maybe checkpoint iteration ``it``; the env-step count and latest checkpoint after it."""
    last = cfg.runner.iterations
    t0 = time.perf_counter()
    metrics, steps = iterations(it)
    env_steps += steps
    metrics["env_steps"] = env_steps
    metrics |= workers.restarts.metrics(it)  # workers/restarts (in the run), workers/restarts_in_window, backoff
    metrics["env/episodes_dropped"] = float(workers.restarts.episodes_dropped)  # by faults that replayed, in the run
    metrics |= workers.rss_metrics()
    metrics |= workers.busy_metrics()  # where each worker's time went (benchmarks/profile_recipe.py)
    metrics["time/iteration"] = time.perf_counter() - t0  # training, before the eval and the checkpoint
    if due(it, cfg.runner.eval_every, last):
        metrics |= evaluate(it)
    logger.log(metrics, step=it, videos=evaluate.videos())
    history.append(metrics)
    if len(history) > 2 * HISTORY_KEPT:  # a long run: ~3.6 KB an iteration would grow the driver for good
        del history[:-HISTORY_KEPT]  # (metrics.jsonl keeps every row); in blocks, so trimming costs O(1) a row
    if cfg.runner.checkpoints_at(it) or stop.signal or logger.disk_full:
        in_flight = iterations.pause()  # async: producers at rest, so the envs saved match the counters
        best = cfg.runner.keep_best
        score = {"score": {best: float(metrics[best])}} if best and best in metrics else {}
        checkpoint = save_checkpoint(it, workers, cfg, logger, run_dir, env_steps, process_rng_state(),
                                     resume_state(workers, warned), in_flight | score)
        iterations.resume()
    if logger.disk_full:  # the checkpoint above got through: stop while the run can still resume
        raise DiskFullError(f"{logger.disk_full}; stopped after saving checkpoint {checkpoint}")
    return env_steps, checkpoint


def save_checkpoint(it: int, workers: Workers, cfg: Config, logger: MetricLogger, run_dir: Path, env_steps: int,
                    rng: dict[str, Any], workers_state: dict[str, Any], in_flight: dict[str, Any]) -> Path:
    """Checkpoint iteration ``it``: the actor's state, plus the driver's ``rng``, the envs and rollout RNGs
    (``workers_state``, signed), the restart state and, async, the rollouts ``in_flight``."""
    checkpoint = workers.save_checkpoint(run_dir / "checkpoints" / f"iter_{it:06d}", {
        "iteration": it, "env_steps": env_steps, "config": to_dict(cfg), "wandb_id": logger.wandb_id,
        "rng": rng, "workers": workers_state, "worker_restarts": workers.restarts.used,
        "episodes_dropped": workers.restarts.episodes_dropped, "restart_state": workers.restarts.state_dict(),
        **in_flight,
    })
    prune_checkpoints(run_dir, cfg.runner.keep_checkpoints, cfg.runner.keep_best, cfg.runner.keep_best_mode)
    return checkpoint


def checkpoint_before(stop: FaultStop, it: int, workers: Workers, cfg: Config, logger: MetricLogger, run_dir: Path,
                      env_steps: int, rng: dict[str, Any], warned: set[str]) -> Path | None:
    """Checkpoint iteration ``it``, the last completed one, before ``stop`` ends the run: the envs and rollout RNGs
    from the snapshot the failed epoch started from (it was never applied, so they match the actor and the
    counters), the driver's ``rng`` from before it; None if ``stop`` carries no snapshot."""
    if stop.state is None:
        return None
    return save_checkpoint(it, workers, cfg, logger, run_dir, env_steps, rng, signed(stop.state, warned), {})


def train_iteration(workers: Workers, cfg: Config, it: int) -> tuple[dict[str, float], int]:
    """Sync, rollout, update: the iteration's metrics and the env sub-steps it ran."""
    t0 = time.perf_counter()
    workers.sync_weights()
    assert workers.resets is not None  # an on-policy run (an off-policy one has its own loop)
    reset = workers.resets(it, cfg.env.num_envs, cfg.experiment.seed)
    trajectories = workers.rollout(cfg.rollout.chunk_steps, it, reset)
    t1 = time.perf_counter()
    metrics = workers.update(trajectories, it)
    t2 = time.perf_counter()
    steps = sum(t.num_env_steps for t in trajectories)
    metrics |= episode_metrics("env", [e for t in trajectories for e in t.episodes])
    metrics |= {"time/rollout": t1 - t0, "time/update": t2 - t1, "env_steps_per_s": steps / (t1 - t0)}
    return metrics, steps


def draw_learning_curves(run_dir: Path) -> Path | None:
    """``learning_curves.png``; a failure is reported, never raised (training is done)."""
    try:
        return plot_run(run_dir)
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"plotting learning curves failed: {exc!r}", stacklevel=2)
        return None


def make_run_dir(cfg: Config) -> Path:
    """A new ``<output_dir>/<name>-<timestamp>``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(cfg.experiment.output_dir) / f"{cfg.experiment.name}-{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = Path(cfg.experiment.output_dir) / f"{cfg.experiment.name}-{stamp}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def save_config(cfg: Config, run_dir: Path) -> None:
    """The resolved config as ``config.yaml`` (without ``resume_from``: it describes the run itself)."""
    runner = dataclasses.replace(cfg.runner, resume_from=None)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(dataclasses.replace(cfg, runner=runner)),
                                                        sort_keys=False))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

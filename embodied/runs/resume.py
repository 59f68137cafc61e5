"""Putting a run back where a checkpoint left it, and what a checkpoint records for that.

``runner.resume_from`` (a checkpoint, a run dir: its newest valid checkpoint, or ``auto``: the newest run of
the experiment) continues that run in its run dir: the actor (policy, optimizer, weight version), iteration,
env-step count, restart state (window, backoff, broken-env streaks) and wandb run go on, and the envs
mid-episode when their snapshots verify with this user's key (``embodied.checkpoint.trust``; else they restart from their
seeds) together with every RNG stream, so the resumed run goes on as if it had never stopped.

Why a module of its own, beside ``embodied.checkpoint.store`` rather than in it: ``checkpoint`` is the on-disk
format (write, verify, find, read a folder) and sits below the workers; resuming needs the workers (their
envs, RNGs and actor) and the config, so it sits above them, with the runner, which only calls
``resume_point`` before it starts and ``restore_run`` after.
"""

from __future__ import annotations

import random
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from embodied.backends import ActorLostError, ClusterLostError
from embodied.checkpoint.store import CheckpointError, ResumePoint, check_env_fits, find_checkpoint, load_resume_point
from embodied.checkpoint.trust import sign, signing_key, snapshot_blobs, trusted
from embodied.config import Config, ConfigError
from embodied.logging.logger import read_wandb_id
from embodied.workers.group import Workers
from embodied.workers.restarts import FaultStop


def restore_run(workers: Workers, resume: ResumePoint, cfg: Config) -> None:
    """The run ``resume`` points at into freshly started ``workers``: the actor, RNGs, envs and counters."""
    check_env_fits(resume.state, cfg.env.id, workers.spec, "runner.resume_from")
    workers.load_actor_state(resume.actor)
    restore_exact(workers, resume.state, cfg.runner.trust_checkpoint, resume.checkpoint)
    workers.restarts.load_state_dict(resume.state.get("restart_state") or {  # the restart window goes on
        "total": resume.state.get("worker_restarts", 0), "episodes_dropped": resume.state.get("episodes_dropped", 0)})
    in_flight = resume.state.get("async_in_flight") or resume.state.get("rollouts_in_flight")  # async; off-policy
    if in_flight:
        print(f"runner.resume_from: {in_flight} rollout(s) were in flight when {resume.checkpoint} was saved; they "
              f"are not trained on, so the resumed run is not the one that would have gone on", file=sys.stderr)


def with_resume_command(exc: ClusterLostError | ActorLostError | FaultStop, checkpoint: Path | None,
                        run_dir: Path) -> RuntimeError:
    """``exc`` with what the run can go on from: its last checkpoint (the workers, and the state they held
    since, are gone with the cluster or the actor rank; a ``FaultStop`` checkpointed the last completed
    iteration first); ``run_dir`` is kept on it for the resume command."""
    saved = (f"its last checkpoint is {checkpoint}" if checkpoint is not None else
             "it saved no checkpoint yet (runner.checkpoint_every)")
    when = "Once the cluster is back, resume" if isinstance(exc, ClusterLostError) else "Resume"
    # args[0] is the message (a FaultStop keeps the last failure's error in args[1], printed after it)
    lost = type(exc)(f"{exc.args[0]}; the run stopped: {saved}. {when} it with runner.resume_from={run_dir}",
                     *exc.args[1:])
    lost.run_dir = run_dir  # type: ignore[attr-defined]
    return lost



def resume_state(workers: Workers, warned: set[str]) -> dict:
    """``workers.resume_state()``, signed (``signed``)."""
    return signed(workers.resume_state(), warned)


def signed(state: dict, warned: set[str]) -> dict:
    """``state`` (``Workers.resume_state()``'s format) with its env snapshots signed with this user's key
    (``embodied.checkpoint.trust``); says once if the envs cannot be saved (resume then reseeds them)."""
    state["envs_signature"] = sign(snapshot_blobs(state["envs"]), signing_key())
    reasons = [s for rank in state["envs"] for s in rank if isinstance(s, str)]
    if reasons and not warned:
        warned.add(reasons[0])
        warnings.warn(f"checkpoints will not resume exactly: {reasons[0]}; a resumed run restarts its envs from "
                      f"their seeds", stacklevel=3)
    return state


def restore_exact(workers: Workers, state: dict, trust: bool = False, checkpoint: Path | None = None) -> None:
    """RNG streams and envs as the checkpoint left them, so a resumed run goes on as if never stopped; the
    env snapshots only if they verify with this user's key, or ``trust`` (``runner.trust_checkpoint``)."""
    if "rng" in state:
        set_process_rng_state(state["rng"])
    problems = workers.restore(trusted(state.get("workers") or {}, trust, checkpoint))
    if problems:
        warnings.warn(f"resume is not exact: {'; '.join(problems)}; the envs restart from their seeds", stacklevel=3)


def process_rng_state() -> dict:
    """This process's python, numpy and torch RNG states, as plain types and tensors (weights_only-loadable)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": random.getstate(), "numpy": (kind, keys.tolist(), pos, has_gauss, cached),
            "torch": torch.get_rng_state()}


def set_process_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def resume_point(cfg: Config) -> ResumePoint | None:
    """Where ``runner.resume_from`` says to go on (None: a new run); refuses a checkpoint of another env."""
    source = cfg.runner.resume_from
    if source == "auto":
        source = newest_run(cfg)
        if source is None:
            print(f"runner.resume_from=auto: no earlier run of {cfg.experiment.name!r} with a checkpoint in "
                  f"{cfg.experiment.output_dir}; starting a new run")
            return None
        print(f"runner.resume_from=auto: continuing {source}")
    if source is None:
        return None
    try:
        resume = load_resume_point(source)
        check_env_fits(resume.state, cfg.env.id, None, "runner.resume_from")
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        raise ConfigError(f"runner.resume_from: {exc}" if not str(exc).startswith("runner.") else str(exc)) from None
    return resume


def newest_run(cfg: Config) -> Path | None:
    """The newest run dir of ``experiment.name`` (by its newest checkpoint's time) that holds a valid checkpoint."""
    runs = []
    name = re.compile(re.escape(cfg.experiment.name) + r"-\d{8}-\d{6}(-\d+)?")  # make_run_dir's names
    for run_dir in Path(cfg.experiment.output_dir).glob(f"{cfg.experiment.name}-*"):
        if not name.fullmatch(run_dir.name):
            continue
        try:
            runs.append((find_checkpoint(run_dir).stat().st_mtime, run_dir))
        except (FileNotFoundError, CheckpointError):
            continue
    return max(runs)[1] if runs else None



def wandb_id_of(resume: ResumePoint | None, run_dir: Path) -> str | None:
    """The wandb run a resumed run continues (from its checkpoint, else its run dir)."""
    return (resume.wandb_id or read_wandb_id(run_dir)) if resume else None

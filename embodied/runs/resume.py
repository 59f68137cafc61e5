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
from typing import Any

import numpy as np
import torch

from embodied.backends import ClusterLostError, WorkerLostError
from embodied.checkpoint.store import CheckpointError, ResumePoint, check_env_fits, find_checkpoint, load_resume_point
from embodied.checkpoint.trust import sign, signing_key, snapshot_blobs, trusted
from embodied.config import Config, ConfigError, config_from_dict, to_dict
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


def with_resume_command(exc: ClusterLostError | WorkerLostError | FaultStop, checkpoint: Path | None,
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
    check_same_maths(cfg, resume)
    return resume


# What may change between a run and its resume without changing what it computes: how long and how often it
# evaluates, checkpoints and logs, how it treats faults, where and on how many processes its workers and actor
# ranks run (the ranks sum to the one-rank step). Every other field is the maths.
OPERATIONAL = ("experiment.output_dir", "experiment.name", "policy.init_from", "cluster.", "actor.num_ranks",
               "actor.strategy", "actor.dist_backend", "actor.grad_accumulation_steps", "runner.iterations", "runner.eval_every", "runner.eval_episodes",
               "runner.checkpoint_every", "runner.eval_video", "runner.extra_evals", "runner.resume_from",
               "runner.keep_checkpoints", "runner.keep_best", "runner.keep_best_mode", "runner.faults.",
               "runner.trust_checkpoint", "runner.resume_changed", "runner.plot", "logger.", "env.step_timeout_s", "env.build_retries", "env.build_backoff_s",
               "env.preflight", "eval_env.", "sft.")


def check_same_maths(cfg: Config, resume: ResumePoint) -> None:
    """Refuse to resume where the recipe changed a field that changes the maths (``OPERATIONAL`` lists the others),
    naming each with its checkpoint's and its new value, unless ``runner.resume_changed``; print them then."""
    saved = resume.state.get("config")
    if not isinstance(saved, dict):
        return  # a checkpoint without its config (written by hand): nothing to compare
    try:
        before = flat(to_dict(config_from_dict(saved)))
    except ConfigError:
        return  # a config this version cannot read: load_resume_point's checks say what they can
    now = flat(to_dict(cfg))
    changed = [f"{key}: {before.get(key)!r} in the checkpoint, {now.get(key)!r} now" for key in sorted(before | now)
               if before.get(key) != now.get(key) and not key.startswith(OPERATIONAL) and key not in OPERATIONAL]
    if not changed:
        return
    listing = "\n  ".join(changed)
    if not cfg.runner.resume_changed:
        raise ConfigError(f"runner.resume_from: the recipe changed what the run computes since {resume.checkpoint}:"
                          f"\n  {listing}\nresume with the checkpoint's values, or set runner.resume_changed=true to "
                          "go on with the new ones")
    print(f"runner.resume_changed: going on from {resume.checkpoint} with the new values of:\n  {listing}",
          file=sys.stderr)


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{"section.field": value}`` (lists kept whole)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}.{key}" if prefix else str(key))
    return out or {prefix: {}}


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

"""The ``runner:`` section of an experiment's config: how long a run trains, how often it evaluates and checkpoints,
what it keeps and resumes from, and what it does when env workers fail (``runner.faults``); each dataclass with the
checks of its own fields (``validate(path)``), as in ``embodied.config.sections``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from embodied.core.registry import ENV_SETS, ENVS, UnknownNameError


def due(it: int, every: int, last: int) -> bool:
    """Every ``every`` iterations (0: never) and always at the last one."""
    return it == last or (every > 0 and it % every == 0)


@dataclass
class ExtraEval:
    """One more env evaluated every ``runner.eval_every`` beside the training env (what training does to other
    tasks, or to a perturbed suite), logged as ``eval/<env id>/success_rate`` (and ``/ci_low``, ``/ci_high``)."""

    id: str = ""  # an env id, or a named set (`embodied eval --suites`'s, e.g. libero-pro-object) for each of its ids
    episodes: int = 10  # episodes per eval of each env (a fixed eval set, e.g. LIBERO's: spread evenly over it)
    # env.kwargs set over the eval env's for this one, e.g. {task_ids: [1, 2, 3]}: the other tasks of the suite trained on
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""  # the metric's name, eval/<name>/success_rate (default: the env id); needed to tell apart two
    # entries of the same id

    def validate(self, path: str) -> list[str]:
        """Problems of this entry, each prefixed by ``path`` (``runner.extra_evals[0]``)."""
        problems = [] if self.episodes >= 1 else [f"{path}.episodes: must be >= 1, got {self.episodes}"]
        if not self.id.strip():
            return problems + [f"{path}.id: an env id or a named set is needed (`embodied list envs`)"]
        if self.id in ENV_SETS and self.name:
            problems.append(f"{path}.name: {self.id} is a named set of several envs, each logged under its own id")
        if "/" in self.name:
            problems.append(f"{path}.name: {self.name!r} would split the metric's name; use no '/'")
        if self.id not in ENV_SETS:
            try:
                ENVS.entry_point(self.id)
            except UnknownNameError as exc:
                problems.append(f"{path}.id: {exc} Named sets: {', '.join(ENV_SETS.names()) or '(none)'}")
        return problems


@dataclass
class FaultsConfig:
    """What a run does when env workers fail (``embodied.workers.restarts``): restart them, at a bounded rate."""

    # Env workers that fail (an env raises, hangs past env.step_timeout_s, or its process dies) are restarted and the
    # rollout epoch (or eval round) redone from its start. A rate, not a lifetime count: at most this many restarts
    # within any runner.faults.restart_window iterations, training and eval env workers together; one more stops the
    # run after checkpointing the last completed iteration (0: the first failure stops it).
    max_worker_restarts: int = 3
    restart_window: int = 20  # iterations over which max_worker_restarts counts (3 in 20: hours of LIBERO)
    max_total_restarts: int | None = None  # an optional lifetime cap on the run's env worker restarts (null: none)
    # A worker rebuilt again within runner.faults.restart_window iterations of its last rebuild first waits this long,
    # doubled for each further such rebuild, so a flapping simulator (GL context, license server, disk) can recover.
    restart_backoff_s: float = 5.0  # 0: no wait
    restart_backoff_max_s: float = 300.0  # the backoff's cap (>= runner.faults.restart_backoff_s)
    # A worker that fails the same way (the same env call) within this many iterations of a rebuild from fresh
    # seeds, and again after the next rebuild, fails from any state: the run stops with that diagnosis at once.
    broken_env_iterations: int | None = 5  # null: never diagnosed (only the rate stops the run)

    def validate(self, path: str = "runner.faults") -> list[str]:
        """The restart rate, its lifetime cap, the backoff and the broken-env horizon (``embodied.workers.restarts``)."""
        p = []
        if self.max_worker_restarts < 0:
            p.append(f"{path}.max_worker_restarts: must be >= 0 (0: no restarts), got {self.max_worker_restarts}")
        if self.restart_window < 1:
            p.append(f"{path}.restart_window: must be >= 1 (iterations over which {path}.max_worker_restarts "
                     f"counts), got {self.restart_window}")
        if self.max_total_restarts is not None and self.max_total_restarts < 0:
            p.append(f"{path}.max_total_restarts: a lifetime cap must be >= 0 (or null: no cap), got "
                     f"{self.max_total_restarts}")
        base, cap = self.restart_backoff_s, self.restart_backoff_max_s
        if not (math.isfinite(base) and base >= 0):
            p.append(f"{path}.restart_backoff_s: must be a number of seconds >= 0 (0: no wait), got {base}")
        elif not (math.isfinite(cap) and cap >= base):
            p.append(f"{path}.restart_backoff_max_s: the backoff's cap must be >= its base "
                     f"{path}.restart_backoff_s={base:g}, got {cap}")
        if self.broken_env_iterations is not None and self.broken_env_iterations < 0:
            p.append(f"{path}.broken_env_iterations: must be >= 0 (or null: no diagnosis), got "
                     f"{self.broken_env_iterations}")
        return p


@dataclass
class RunnerConfig:
    iterations: int = 100  # training iterations (sync, rollout, update, log)
    # sync: rollout, then update, in turn. async (embodied/runs/async_iterations.py): env and rollout workers keep
    # producing the next rollouts while the actor trains on earlier ones (algorithm.max_staleness bounds the lag).
    mode: Literal["sync", "async"] = "sync"
    eval_every: int = 10  # iterations between evals (0: only at the end)
    eval_episodes: int = 32  # episodes per eval
    # How evals act: false, the policy's greedy (mean) actions; true, actions sampled as training rollouts sample
    # them, reproducibly (the RNG seeded from the eval seeds). Every eval of the run (periodic, extra, SFT's) and
    # `embodied eval` on its config follow it. A clone of noisy demonstrations (DART) can stall where its mean
    # action is zero; sampled, it acts as the demonstrator was recorded.
    eval_sample: bool = False
    checkpoint_every: int = 50  # iterations between checkpoints (0: only at the end)
    eval_video: Literal["none", "last", "all"] = "none"  # evals that record videos (see logger.video); envs must render
    # More envs evaluated at every eval beside the training env, each with its own episode count, e.g.
    # [{id: LIBERO-Object-Swap-v0, episodes: 10}]; engine-generic (any env id, or a named set of them).
    extra_evals: list[ExtraEval] = field(default_factory=list)
    # A checkpoint folder, or a run dir (its newest valid checkpoint), to continue in its run dir;
    # "auto": the newest run of experiment.name under experiment.output_dir that has one (else start afresh).
    resume_from: str | None = None
    keep_checkpoints: int = 0  # the newest checkpoints kept on disk (0: all)
    # A metric logged at evals (e.g. eval/success_rate): the checkpoint whose eval scored best on it is kept beside
    # the newest keep_checkpoints (ties: the newest); null: none. keep_best_mode says whether higher is better.
    keep_best: str | None = None
    keep_best_mode: Literal["max", "min"] = "max"
    faults: FaultsConfig = field(default_factory=FaultsConfig)  # what a run does when env workers fail
    # Resume a checkpoint's env snapshots (pickles) even when they do not carry a signature made with your own key
    # (embodied.checkpoint.trust): only for a run folder you trust, e.g. one you made on another machine.
    trust_checkpoint: bool = False
    # Resume although the recipe changed a field that changes the maths (the algorithm, the policy, the envs...):
    # the differences are printed either way, and refused without this.
    resume_changed: bool = False
    plot: bool = True  # write learning_curves.png into the run dir at the end of training

    def validate(self, path: str = "runner") -> list[str]:
        """Problems of this section's own fields, each prefixed by its path."""
        p = [f"{path}.{name}: must be >= {low}{note}, got {n}" for name, n, low, note in (
            ("iterations", self.iterations, 1, ""), ("eval_every", self.eval_every, 0, ""),
            ("eval_episodes", self.eval_episodes, 1, ""), ("checkpoint_every", self.checkpoint_every, 0, ""),
            ("keep_checkpoints", self.keep_checkpoints, 0, " (0 keeps all)")) if n < low]
        if self.keep_best is not None and not self.keep_best.strip():
            p.append(f"{path}.keep_best: an empty metric name; name one logged at evals (e.g. eval/success_rate) "
                     "or leave it null")
        if self.keep_best is not None and self.checkpoint_every and self.eval_every and \
                self.checkpoint_every % self.eval_every:
            p.append(f"{path}.keep_best: a checkpoint is scored by the eval of its own iteration, and "
                     f"{path}.checkpoint_every={self.checkpoint_every} is not a multiple of "
                     f"{path}.eval_every={self.eval_every}, so some checkpoints would have none")
        if self.resume_from is not None and self.resume_from.strip() == "":
            p.append(f"{path}.resume_from: an empty path (an unset shell variable?); leave it out or set it to null "
                     "to start without one")
        p += self.faults.validate(f"{path}.faults")
        for i, extra in enumerate(self.extra_evals):
            p += extra.validate(f"{path}.extra_evals[{i}]")
        names = [e.name or e.id for e in self.extra_evals]
        if len(set(names)) != len(names):
            p.append(f"{path}.extra_evals: two entries log under one name ({names}); give {path}.extra_evals[i].name "
                     "to tell them apart")
        return p

    def checkpoints_at(self, it: int) -> bool:
        """Whether iteration ``it`` ends with a scheduled checkpoint (a stop signal or a full disk adds others)."""
        return due(it, self.checkpoint_every, self.iterations)

"""Evaluation runs: periodic eval during training, and ``embodied eval`` (a checkpoint -> ``eval.json`` and a
table; what is measured and reported is ``embodied.evaluation.stats``).

    report = evaluate_checkpoint(cfg, Path("runs/x/checkpoints/iter_000100"), episodes=64,
                                 out_dir=Path("runs/x/eval/iter_000100"), video=True)
    print(format_table(report))

Eval is greedy (``deterministic=True``) on a fixed set of initial states: episode ``k`` starts
from seed ``embodied.core.seeds.eval_seed(experiment.seed, k)``, apart from every training seed, so the
same checkpoint gives the same numbers every time. ``embodied eval --sample`` samples the actions
instead, from an RNG seeded by those seeds, so it repeats itself as well.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import torch
from tqdm import tqdm

from embodied.backends import Backend, ClusterLostError, make_backend, user_packages
from embodied.checkpoint.store import check_env_fits, load_checkpoint
from embodied.config import Config
from embodied.core.types import EpisodeStats
from embodied.env_runtime.preflight import check_policy_fits, preflight
from embodied.evaluation.extra import ExtraEvals, ExtraSuite, suite_metrics
from embodied.evaluation.stats import EvalReport, EvalSummary, eval_metrics, per_task, write_json
from embodied.workers.eval_plan import env_eval_episodes
from embodied.workers.evaluator import Evaluator
from embodied.workers.group import Workers


PERIODIC_BAR_DELAY_S = 5.0  # a periodic eval shows its bar only once it has run this long


class EvalProgress:
    """A progress bar over an eval's episodes, as training has one over iterations: episodes done of the total,
    success so far and tqdm's ETA. Called with each round's episodes (``Evaluator.run``'s ``progress``): a
    round is ``eval_env.num_envs`` episodes played together, so the bar moves a round at a time.

    ``delay_s``: nothing is shown before the eval has run that long (tqdm's ``delay``), so the evals of a second
    that a training run makes every few iterations print nothing; ``leave``: the bar stays when done.
    """

    def __init__(self, total: int, desc: str, enabled: bool = True, delay_s: float = 0.0, leave: bool = True) -> None:
        self.bar = tqdm(total=total, desc=desc, unit="episode", file=sys.stdout, disable=not enabled, delay=delay_s,
                        leave=leave, dynamic_ncols=True)
        self.successes = 0

    def __call__(self, episodes: list[EpisodeStats]) -> None:
        self.successes += sum(bool(e.success_once) for e in episodes)
        done = self.bar.n + len(episodes)
        if done:
            self.bar.set_postfix(success=f"{self.successes / done:.3f}", refresh=False)
        self.bar.update(len(episodes))

    def __enter__(self) -> EvalProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


class PeriodicEval:
    """Eval during training that never stops training.

    An eval env worker that fails is replaced and its round redone within the run's restart rate, which
    training shares (``runner.faults.max_worker_restarts`` within ``runner.faults.restart_window``; see ``Evaluator``);
    an eval that still raises (the rate spent, an env broken in every process) is reported, its episodes
    counted as dropped, and periodic eval is switched off, but training goes on (a hung eval env is left
    behind, never waited on); video problems are reported and the run goes on without them.
    """

    def __init__(self, workers: Workers, cfg: Config, run_dir: Path) -> None:
        self.workers, self.cfg, self.run_dir = workers, cfg, run_dir
        self.failed = False
        self.extra = ExtraEvals(workers, cfg)  # runner.extra_evals: built at the first eval, kept till close()
        # A mixture eval env: the run's evaluator plays its first member, these the others (each its own eval set).
        members = cfg.eval_members()
        self.members = ExtraEvals(workers, cfg, [ExtraSuite(m, m, cfg.runner.eval_episodes) for m in members[1:]])
        self.first = members[0] if len(members) > 1 else None

    def __call__(self, iteration: int) -> dict[str, float]:
        """``eval/*`` metrics of the weights just trained ({} once eval has failed)."""
        if self.failed:
            return {}
        n = self.cfg.runner.eval_episodes
        video_dir = str(self.run_dir / "videos" / f"iter_{iteration:06d}") if self.records(iteration) else None
        t0 = time.perf_counter()
        self.workers.evaluator.iteration = iteration  # labels a restart of an eval env worker
        actor, wait = self.workers.actor_group, self.workers.backend.wait
        try:
            wait(actor.call("use_average", True))  # actor.ema_decay: eval the average (else a no-op)
            try:
                self.workers.sync_weights()
                with self.progress_bar(iteration, n) as progress:
                    episodes = [e for e in self.workers.evaluator.run(n, video_dir, self.cfg.runner.eval_sample,
                                                                      progress)
                                if e.env_index < n]
                others = self.members.episodes(iteration)
                extra = self.extra(iteration)  # eval/<env id>/*: the same weights (the average, with ema_decay)
            finally:
                wait(actor.call("use_average", False))  # the next iteration publishes the live weights again
        except ClusterLostError:
            raise  # the run stops (embodied.runs.train says where it can go on from)
        except Exception as exc:  # noqa: BLE001 - training goes on without eval (also when the restart rate is spent)
            warnings.warn(f"eval at iteration {iteration} failed, periodic eval switched off: {type(exc).__name__}: "
                          f"{exc}", stacklevel=2)
            self.failed = True
            return {"eval/failed": 1.0, "eval/episodes_dropped": float(n)}  # none of its episodes has a result
        dropped = len(self.workers.evaluator.dropped)  # left out: their env's fault replayed (Evaluator.run)
        if self.first is not None:  # a mixture: pooled eval/* over its members, and each member's eval/<id>/*
            by_member = {self.first: episodes, **others}
            extra |= {k: v for name, found in by_member.items()
                      for k, v in (suite_metrics(name, found) if found is not None
                                   else {f"eval/{name}/failed": 1.0}).items()}
            episodes = [e for found in by_member.values() if found is not None for e in found]
        return eval_metrics(episodes) | extra | {"eval/episodes_dropped": float(dropped),
                                                 "time/eval": time.perf_counter() - t0}

    def close(self) -> None:
        """Shut the extra evals' workers down (the run's own eval workers close with the run's)."""
        self.extra.close()
        self.members.close()

    def progress_bar(self, iteration: int, episodes: int) -> EvalProgress:
        """The eval's bar under training's own (console logger with its bar on), shown once it takes seconds."""
        shown = self.cfg.logger.progress_bar and "console" in self.cfg.logger.backends
        return EvalProgress(episodes, f"eval @ it {iteration}", shown, PERIODIC_BAR_DELAY_S, leave=False)

    def records(self, iteration: int) -> bool:
        """Whether the eval at ``iteration`` records videos (``runner.eval_video``)."""
        mode = self.cfg.runner.eval_video
        return mode == "all" or (mode == "last" and iteration == self.cfg.runner.iterations)

    def videos(self, wait: bool = False) -> dict[str, Path]:
        """Videos finished since the last call, keyed ``eval/video/<name>`` for the logger.

        Keys stay the same from eval to eval (wandb shows one panel with a step slider); should two
        evals' videos finish together, the later eval's wins (the files of both stay on disk).
        """
        if self.cfg.runner.eval_video == "none" or self.failed:
            return {}
        try:
            report = self.workers.evaluator.take_videos(wait)
        except Exception as exc:  # noqa: BLE001
            report_errors([f"collecting eval videos failed: {exc!r}"])
            return {}
        report_errors(report.errors)
        return {f"eval/video/{p.stem}": p for p in sorted(Path(p) for p in report.paths)}


def report_errors(errors: list[str]) -> None:
    for error in errors:
        warnings.warn(error, stacklevel=2)


# -- embodied eval ------------------------------------------------------------------------------


def checkpoint_name(cfg: Config, checkpoint: Path | None) -> str:
    """What an eval report calls its policy: the checkpoint's path, or the configured policy when there is none."""
    if checkpoint is not None:
        return str(checkpoint)
    folder = getattr(cfg.policy, "model_path", None)
    return f"no checkpoint: policy.type={cfg.policy.type}" + (f" from {folder}" if folder else " as initialised")


def evaluate_checkpoint(cfg: Config, checkpoint: Path | None, episodes: int | None, out_dir: Path,
                        video: bool = False, sample: bool = False, same_env: bool = True,
                        backend: Backend | None = None) -> EvalReport:
    """Greedy eval of a checkpoint's policy on ``cfg``'s eval envs; writes ``out_dir/eval.json``.

    ``checkpoint`` None: the policy as ``cfg`` builds it, e.g. a downloaded LeRobot π0 / π0.5 folder named by
    ``policy.model_path`` (with its own statistics), evaluated before any training.

    ``episodes``: how many (None: the env's whole fixed eval set when it publishes one, e.g. LIBERO's
    tasks x 50 init states, else ``runner.eval_episodes``); for a fixed set, spread evenly over it.

    ``sample``: the policy samples its actions, as in training rollouts (reproducibly: the RNG is
    seeded from the eval seeds). RL improves the sampled policy first; this measures it.

    ``same_env``: refuse a checkpoint trained on another env id (off for ``--suites``, whose point is other suites;
    the spaces are checked either way). ``backend``: one to use and leave running (several suites share a Ray
    instance); None: one made and shut down here.
    """
    if cfg.env.preflight:  # check-env's fast checks on one eval env, before any worker starts
        preflight(cfg.resolved_eval_env(), "eval_env", video)
    check_policy_fits(cfg, cfg.resolved_eval_env(), "eval_env")
    state = load_checkpoint(checkpoint) if checkpoint is not None else None
    env_id = cfg.resolved_eval_env().id
    if state is not None:
        check_env_fits(state, env_id, None, f"checkpoint {checkpoint}", same_env)  # before any worker starts
    fixed = env_eval_episodes(cfg.resolved_eval_env())
    if episodes is None:
        episodes = len(fixed) if fixed is not None else cfg.runner.eval_episodes
    torch.manual_seed(cfg.experiment.seed)
    own = backend is None
    backend = make_backend(cfg.cluster, user_packages(cfg)) if backend is None else backend
    try:
        evaluator = Evaluator.start(cfg, backend, cfg.logger.video if video else None)
        try:
            if state is not None:
                check_env_fits(state, env_id, backend.wait(evaluator.envs.group.call("spec"))[0],
                               f"checkpoint {checkpoint}", same_env)
                try:
                    evaluator.load_checkpoint(state["actor"], int(state["actor"].get("version", 0)))
                except (RuntimeError, ValueError) as exc:
                    raise ValueError(f"checkpoint {checkpoint} does not fit policy config {cfg.policy}: {exc}") \
                        from None
            plan = evaluator.plan(episodes)
            with EvalProgress(episodes, "eval", cfg.logger.progress_bar) as progress:
                found = evaluator.run(episodes, str(out_dir / "videos") if video else None, sample, progress)
            provenance = evaluator.provenance()
            videos = evaluator.take_videos(wait=True)
            report_errors(videos.errors)
            evaluator.close()
        finally:
            if not own:  # the shared backend goes on to the next suite without this one's workers (GiBs each)
                evaluator.release()
    finally:
        if own:
            backend.shutdown()
    result = EvalReport(checkpoint_name(cfg, checkpoint), int((state or {}).get("iteration", 0)), env_id,
                        [evaluator.eval_seed(e.env_index) for e in found], EvalSummary.of(found), per_task(found),
                        found, sorted(videos.paths), deterministic=not sample,
                        options=[plan.options_of(e.env_index) for e in found], provenance=provenance,
                        dropped=list(evaluator.dropped))
    write_json(out_dir / "eval.json", result.to_json())
    return result

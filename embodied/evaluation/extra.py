"""``runner.extra_evals``: more envs evaluated at every periodic eval beside the training env.

    extra = ExtraEvals(workers, cfg)          # nothing built yet
    metrics = extra(iteration)                # eval/<name>/success_rate, /ci_low, /ci_high, /episodes, ...
    extra.close()

Each env id gets its own ``Evaluator`` (eval env workers and a rollout group, built at its first eval and kept, so
a LIBERO scene is built once per env worker and reused for every later eval), loaded with the actor's weights of
the moment. An extra eval that fails is reported and switched off; training and the other evals go on.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from embodied.config import Config
from embodied.core.types import EpisodeStats
from embodied.evaluation.stats import EvalSummary
from embodied.evaluation.suites import expand_suites, suite_config


@dataclasses.dataclass(frozen=True)
class ExtraSuite:
    """One env an extra eval runs: its metric name, env id, episodes and the env kwargs over the eval env's."""

    name: str
    env_id: str
    episodes: int
    kwargs: tuple[tuple[str, Any], ...] = ()


def extra_eval_plan(cfg: Config) -> list[ExtraSuite]:
    """Every env ``runner.extra_evals`` names, named sets expanded (each env once), in order."""
    plan: dict[str, ExtraSuite] = {}
    for extra in cfg.runner.extra_evals:
        for env_id in expand_suites([extra.id]):
            name = extra.name or env_id
            plan.setdefault(name, ExtraSuite(name, env_id, extra.episodes, tuple(extra.kwargs.items())))
    return list(plan.values())


def suite_metrics(env_id: str, episodes: list[EpisodeStats]) -> dict[str, float]:
    """``eval/<env id>/*``: success rate with its 95% interval, return, episode length, episodes."""
    s = EvalSummary.of(episodes)
    prefix = f"eval/{env_id}"
    return {f"{prefix}/success_rate": s.success_rate, f"{prefix}/ci_low": s.success_ci95[0],
            f"{prefix}/ci_high": s.success_ci95[1], f"{prefix}/return": s.return_mean,
            f"{prefix}/episode_len": s.episode_len, f"{prefix}/episodes": float(s.episodes)}


def extra_config(cfg: Config, suite: ExtraSuite) -> Config:
    """``cfg`` whose eval env is ``suite``'s (its own episode cap where its class declares one, its kwargs over the
    eval env's)."""
    cfg = suite_config(cfg, suite.env_id)
    kwargs = {**cfg.resolved_eval_env().kwargs, **dict(suite.kwargs)}
    return dataclasses.replace(cfg, eval_env=dataclasses.replace(cfg.eval_env, kwargs=kwargs),
                               runner=dataclasses.replace(cfg.runner, eval_video="none"))


class ExtraEvals:
    """The extra evals of a training run (``Workers``: the run's actor group and backend)."""

    def __init__(self, workers: Any, cfg: Config, plan: list[ExtraSuite] | None = None) -> None:
        """``plan``: the envs to evaluate (default: ``runner.extra_evals``'s; a mixture eval env's other members)."""
        self.workers, self.cfg = workers, cfg
        self.plan = extra_eval_plan(cfg) if plan is None else plan
        self.evaluators: dict[str, Any] = {}
        self.failed: set[str] = set()

    def __call__(self, iteration: int) -> dict[str, float]:
        """The ``eval/<env id>/*`` metrics of the actor's current weights ({} without extra evals)."""
        metrics: dict[str, float] = {}
        for name, found in self.episodes(iteration).items():
            metrics |= suite_metrics(name, found) if found is not None else {f"eval/{name}/failed": 1.0}
        return metrics

    def episodes(self, iteration: int) -> dict[str, list[EpisodeStats] | None]:
        """Each planned env's episodes with the actor's current weights (None: it failed now, and is switched off;
        one switched off before is left out)."""
        if not self.plan:
            return {}
        from embodied.workers.evaluator import Evaluator

        backend = self.workers.backend
        weights = self.workers.actor_group.call("weights", False)[0]  # tensors, even where rollouts share the module
        results: dict[str, list[EpisodeStats] | None] = {}
        for suite in self.plan:
            if suite.name in self.failed:
                continue
            try:
                if suite.name not in self.evaluators:
                    self.evaluators[suite.name] = Evaluator.start(extra_config(self.cfg, suite), backend)
                evaluator = self.evaluators[suite.name]
                evaluator.iteration = iteration
                backend.wait(evaluator.rollout_group.call("sync_weights", weights, True))
                found = [e for e in evaluator.run(suite.episodes, None, self.cfg.runner.eval_sample)
                         if e.env_index < suite.episodes]
            except Exception as exc:  # noqa: BLE001 - training goes on without this extra eval
                warnings.warn(f"extra eval {suite.name} at iteration {iteration} failed and is switched off: "
                              f"{type(exc).__name__}: {exc}", stacklevel=2)
                self.failed.add(suite.name)
                self._release(suite.name)
                results[suite.name] = None
                continue
            results[suite.name] = found
        return results

    def close(self) -> None:
        for evaluator in self.evaluators.values():
            try:
                evaluator.close()
            except Exception as exc:  # noqa: BLE001 - closing at the end of a run
                warnings.warn(f"closing an extra eval failed: {exc!r}", stacklevel=2)
        for name in list(self.evaluators):
            self._release(name)

    def _release(self, name: str) -> None:
        """End a suite's eval workers (switched off, or the run ends) while training's go on."""
        evaluator = self.evaluators.pop(name, None)
        if evaluator is not None:
            try:
                evaluator.release()
            except Exception as exc:  # noqa: BLE001 - the backend's shutdown ends them in any case
                warnings.warn(f"releasing extra eval {name}'s workers failed: {exc!r}", stacklevel=2)

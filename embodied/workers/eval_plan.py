"""Which eval episode each eval env plays in each round: seeded episodes, or a suite's fixed eval set.

Two kinds of eval set, one plan:

- **seeded** (the built-in tasks, any gymnasium env): eval episode ``k`` resets from seed
  ``base + k``; round ``r`` gives env ``i`` episode ``r * n + i``.
- **fixed** (an env class with ``eval_episodes(**env.kwargs) -> list[EvalEpisode]``, e.g. LIBERO's
  task x fixed init state): ``spread`` picks N of them evenly over the set (all of them by
  default in ``embodied eval``), and env ``i`` plays a contiguous run of them, ``rounds`` long, so
  that it keeps one task for as long as possible: a task change rebuilds a heavy scene.

Either way, episodes past N in the last rounds are fillers that the evaluator drops (an env
slot with nothing left replays its last episode, which needs no rebuild).

    plan = EvalPlan.make(n_envs=4, episodes=10, fixed=env_eval_episodes(cfg.resolved_eval_env()))
    for r in range(plan.rounds):
        ids, options = plan.episode_ids(r), plan.options(r)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from embodied.config import EnvConfig
from embodied.core.registry import ENVS
from embodied.core.types import EvalEpisode


def env_eval_episodes(cfg: EnvConfig) -> list[EvalEpisode] | None:
    """The fixed eval set the env class of ``cfg.id`` publishes, or None when it has none."""
    target = ENVS.resolve(cfg.id)
    protocol = getattr(target, "eval_episodes", None)
    if protocol is None or not callable(protocol):
        return None
    episodes = list(protocol(**cfg.kwargs))
    if not episodes or not all(isinstance(e, EvalEpisode) for e in episodes):
        raise TypeError(f"{cfg.id}: eval_episodes() must return a non-empty list of EvalEpisode, got "
                        f"{type(episodes[0]).__name__ if episodes else 'an empty list'}")
    return episodes


def spread(fixed: list[EvalEpisode], n: int) -> list[int]:
    """Indices of ``n`` episodes spread evenly over ``fixed`` (all of them, in order, when n >= its length).

    ``fixed`` is task-major (task 0's states, then task 1's...), so an even spread covers the tasks
    evenly and, within each, states from first to last.
    """
    m = len(fixed)
    if n >= m:
        return list(range(m))
    return [j * m // n for j in range(n)]


@dataclass(frozen=True)
class EvalPlan:
    """Episodes of one eval over ``n_envs`` envs: which eval episode index each env plays each round."""

    n_envs: int
    episodes: int  # N: eval episodes reported (the ones with index < N)
    fixed: tuple[EvalEpisode, ...] | None  # the chosen fixed episodes (length N), or None: seeded
    rounds: int

    @staticmethod
    def make(n_envs: int, episodes: int, fixed: list[EvalEpisode] | None = None) -> EvalPlan:
        if fixed is not None:
            chosen = tuple(fixed[i] for i in spread(fixed, episodes))
            episodes = len(chosen)  # asking for more than the set holds runs the set once
        else:
            chosen = None
        return EvalPlan(n_envs, episodes, chosen, math.ceil(episodes / n_envs))

    def episode_ids(self, round_: int) -> list[int]:
        """Eval episode index of each env in ``round_`` (an index >= ``episodes`` is a filler, dropped)."""
        if self.fixed is None:
            return [round_ * self.n_envs + i for i in range(self.n_envs)]
        return [i * self.rounds + round_ for i in range(self.n_envs)]

    def options(self, round_: int) -> list[dict[str, Any]] | None:
        """Each env's reset options in ``round_`` (None for a seeded set); a filler repeats its env's last episode."""
        if self.fixed is None:
            return None
        out = []
        for i, k in enumerate(self.episode_ids(round_)):
            last_of_slot = min((i + 1) * self.rounds, self.episodes) - 1
            out.append(dict(self.fixed[min(k, last_of_slot)].options))
        return out

    def task_of(self, k: int) -> str | None:
        return self.fixed[k].task if self.fixed is not None and k < self.episodes else None

    def options_of(self, k: int) -> dict[str, Any] | None:
        return dict(self.fixed[k].options) if self.fixed is not None and k < self.episodes else None

    def recorded(self, max_videos: int) -> list[int]:
        """Eval episodes that get videos: the first ``max_videos``; for a fixed set, the first of each task."""
        if self.fixed is None:
            return list(range(min(max_videos, self.episodes)))
        first: dict[str, int] = {}
        for k, episode in enumerate(self.fixed):
            first.setdefault(episode.task, k)
        return sorted(first.values())[:max_videos]

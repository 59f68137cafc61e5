"""RLPD (Ball et al. 2023) on SAC: demonstrations in a second replay, sampled beside online replay.

``algorithm.demos`` names a demonstrations folder (embodied's format or LeRobot, through the one
``Demonstrations`` interface). The off-policy actor turns its episodes into chunk transitions once, at start
(``demo_replay``), and every gradient update draws ``algorithm.demo_ratio`` of its batch from them and the rest
from online replay (``split_batch``, ``mixed_sample``: RLPD's symmetric sampling at 0.5).

A transition is a row's obs, its chunk, the chunk's reward and bootstrap discount as SAC computes them
(``chunk_reward``) and the obs of the chunk after it in the same episode. A row whose chunk ends its episode
bootstraps from nothing when the episode succeeded (the built-in tasks end an episode at success: a
termination); a failed episode's last chunk stored no next obs (a truncation needs one), so it is left out.
Where success is not recorded, every episode is taken as a success. Demonstrations that recorded no rewards (a
LeRobot folder without ``next.reward``) get a sparse success reward: 1 on the sub-step that ends each successful
episode, 0 elsewhere (``sparse_success_rewards``).

    data = open_demos(cfg.algorithm.demos, cfg.policy.action_chunk)       # ConfigError naming algorithm.demos
    keys = fit_demos(data, spec, cfg.policy.action_chunk)                 # the env's obs keys, both sides named
    demos = demo_replay(data, keys, gamma=0.99)
    batch = mixed_sample(demos, online, 256, 0.5, generator)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import torch

from embodied.algorithms.transitions import ReplaySample, chunk_reward, n_step_returns
from embodied.config import ConfigError
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.data import Demonstrations, ReadOptions, open_demonstrations
from embodied.policy.base import PolicySpec
from embodied.replay.buffer import ReplayBuffer

# -- the pure parts -----------------------------------------------------------------------------------


def split_batch(batch_size: int, demo_ratio: float) -> tuple[int, int]:
    """``(from demonstrations, from online replay)`` rows of one batch; the demo share rounds to the nearest row
    (a half up: a batch of 7 at 0.5 draws 4 demonstrations)."""
    demo = math.floor(batch_size * demo_ratio + 0.5)
    return demo, batch_size - demo


def concat_samples(first: ReplaySample, second: ReplaySample) -> ReplaySample:
    """Two samples as one batch, ``first``'s rows before ``second``'s (their obs keys must match)."""
    if first.obs.keys() != second.obs.keys():
        raise ValueError(f"demonstration obs {sorted(first.obs)} and online obs {sorted(second.obs)} differ")
    joined = {}
    for f in fields(ReplaySample):
        a, b = getattr(first, f.name), getattr(second, f.name)
        if not isinstance(a, (dict, torch.Tensor)):  # demo_rows and iteration: the caller's to set
            continue
        joined[f.name] = ({k: torch.cat([a[k], b[k].to(a[k].dtype)]) for k in a} if isinstance(a, dict)
                          else torch.cat([a, b]))
    return ReplaySample(**joined)


def next_rows(episode_indices: np.ndarray, steps: np.ndarray, advance: np.ndarray) -> np.ndarray:
    """int [N]: the row whose chunk follows row i's in its episode (the row of step ``steps[i] + advance[i]``),
    or -1 where row i's chunk ends the episode."""
    where = {(int(e), int(s)): i for i, (e, s) in enumerate(zip(episode_indices, steps, strict=True))}
    return np.array([where.get((int(e), int(s + a)), -1)
                     for e, s, a in zip(episode_indices, steps, advance, strict=True)], dtype=np.int64)


def sparse_success_rewards(executed: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """float32 [N, C]: 1 on the last executed sub-step of each chunk that ends a (successful) episode, else 0."""
    rewards = np.zeros(executed.shape, dtype=np.float32)
    last = executed.sum(-1) - 1
    rows = np.flatnonzero(ends & (last >= 0))
    rewards[rows, last[rows]] = 1.0
    return rewards


# -- the demonstrations as replay -------------------------------------------------------------------


def demos_error(exc: Exception) -> ConfigError:
    """A demonstrations folder that cannot serve the run, as a ``ConfigError`` naming ``algorithm.demos``."""
    return ConfigError(f"algorithm.demos: {exc}")


def open_demos(path: str | list[str], action_chunk: int) -> Demonstrations:
    """The demonstrations ``algorithm.demos`` names (a folder or a list read as one), in either format; a missing
    or unreadable folder is refused."""
    try:
        return open_demonstrations(path, ReadOptions(action_chunk=action_chunk))
    except (FileNotFoundError, ValueError) as exc:
        raise demos_error(exc) from None


def env_obs_keys(spec: PolicySpec) -> list[str]:
    """The array observations the env gives (what online replay stores)."""
    return [k for k, given in ((STATES, spec.state_dim > 0), (MAIN_IMAGES, spec.image_shape is not None),
                               (WRIST_IMAGES, spec.wrist_image_shape is not None)) if given]


def fit_demos(data: Demonstrations, spec: PolicySpec, action_chunk: int) -> list[str]:
    """Refuse demonstrations whose chunk, observation keys or sizes, or action dimension differ from the env's
    (``spec``), naming both sides; returns the env's obs keys, which the demo replay stores."""
    keys = env_obs_keys(spec)
    try:
        data.fit(spec, action_chunk, keys)
    except ValueError as exc:
        raise demos_error(exc) from None
    sample = data[0].obs
    env_shapes = {STATES: (spec.state_dim,), MAIN_IMAGES: spec.image_shape, WRIST_IMAGES: spec.wrist_image_shape}
    shapes = {k: (tuple(np.shape(sample[k])), tuple(env_shapes[k] or ())) for k in keys}  # (theirs, the env's)
    wrong = [f"its {k} are {theirs}, the env's {env}" for k, (theirs, env) in shapes.items() if theirs != env]
    if wrong:
        raise demos_error(ValueError(f"dataset {data.path} does not fit the env: " + "; ".join(wrong)))
    return keys


def demo_replay(data: Demonstrations, obs_keys: list[str], gamma: float, n_step: int = 1,
                column: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                bootstrap_terminations: bool = False) -> ReplayBuffer:
    """Every chunk transition of the demonstrations (see the module docstring) in a replay buffer of their size,
    as ``n_step`` returns (``n_step_returns``: a window follows the episode's chunks and stops before one that is
    left out, so it always ends on a chunk whose next obs is recorded). ``column(actions [N, C, A], executed
    [N, C])`` is what replay's action column holds (the learner's ``demo_actions``; default: the actions).
    ``bootstrap_terminations``: a successful episode's last chunk bootstraps too, from its own obs (the recordings
    hold none after it)."""
    rows = [data[i] for i in range(len(data))]
    executed = np.stack([r.executed.numpy() for r in rows])  # [N, C]
    advance = np.ones(len(rows), dtype=np.int64) if data.chunk_rows else executed.sum(-1)
    after = next_rows(np.asarray(data.episode_indices), np.asarray(data.steps), advance)
    ends = after < 0
    success = data.episode_success
    terminal = ends & (np.asarray(success, dtype=bool) if success is not None else True)
    recorded = data.rewards
    rewards = (np.asarray(recorded, dtype=np.float32) if recorded is not None
               else sparse_success_rewards(executed, terminal))
    keep = np.flatnonzero(~ends | terminal)  # a failed episode's last chunk has no next obs to bootstrap from
    if not len(keep):
        raise demos_error(ValueError(f"dataset {data.path} holds no chunk transition: each of its episodes failed "
                                     f"within one chunk (collect successful ones)"))
    kept = np.zeros(len(rows), dtype=bool)
    kept[keep] = True
    following = np.where(~ends & kept[after], after, -1)  # the next chunk, where it is a transition too
    after = np.where(ends, np.arange(len(rows)), after)  # a terminal chunk's next obs is never used: its own
    obs = {k: torch.from_numpy(np.stack([np.asarray(r.obs[k]) for r in rows])) for k in obs_keys}
    reward, discount = chunk_reward(torch.from_numpy(rewards), torch.from_numpy(executed), gamma)
    reward, discount, bootstrap, last = n_step_returns(reward, discount, torch.from_numpy(terminal),
                                                       torch.from_numpy(following), n_step, bootstrap_terminations)
    index = torch.from_numpy(keep)
    replay = ReplayBuffer(len(keep))
    actions = torch.stack([r.actions for r in rows])
    stored = actions if column is None else column(actions, torch.from_numpy(executed))
    replay.add_transitions({k: v[index] for k, v in obs.items()}, stored[index],
                           reward[index], discount[index], bootstrap[index],
                           {k: v[torch.from_numpy(after)[last[index]]] for k, v in obs.items()})
    return replay


def mixed_sample(demos: ReplayBuffer, online: ReplayBuffer, batch_size: int, demo_ratio: float,
                 generator: torch.Generator) -> tuple[ReplaySample, int]:
    """One batch, ``demo_ratio`` of it from ``demos`` and the rest from ``online`` (``split_batch``), its
    ``demo_rows`` first rows from demonstrations; and how many that is."""
    n_demo, n_online = split_batch(batch_size, demo_ratio)
    if n_online == 0:
        batch = demos.sample(n_demo, generator)
    elif n_demo == 0:
        batch = online.sample(n_online, generator)
    else:
        batch = concat_samples(demos.sample(n_demo, generator), online.sample(n_online, generator))
    batch.demo_rows = n_demo
    return batch, n_demo

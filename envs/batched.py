"""The lower-level simulator protocol: step a whole batch of envs at once.

Implement ``BatchedEnv`` directly when per-env gymnasium objects do not fit: a GPU simulator
that steps thousands of envs in one kernel, or a fleet of remote robots behind one client.
``ChunkedVectorEnv`` is the reference implementation over gymnasium envs; an implementation
of your own must honour the same chunk-step contract (``embodied.envs.chunked``'s docstring):

- ``reset(seed)`` resets every env (env ``i`` seeded with ``seed + i``) and returns the batched obs;
- ``chunk_step(actions float32[B, C, A])`` returns a ``ChunkStepResult``: sub-actions stop at the
  sub-step an episode ends, ``executed`` marks what ran, done envs are reset at the chunk
  boundary when ``auto_reset`` (``final_obs`` keeps the terminal obs) or stay done otherwise;
- ``render()`` gives one RGB frame per env; ``close()`` frees everything.

Register it like any env (``ENVS.register("MyGpuSim-v0", "my_pkg.sim:MyGpuSim")`` or name it
in ``env.id``) and set the class attribute ``batched = True``. The env worker then constructs it
once per env rank (and pipeline stage) as::

    cls(num_envs=..., auto_reset=..., obs_mode=..., max_episode_steps=..., **env.kwargs)
    # plus render_mode="rgb_array" when eval videos are on (runner.eval_video, embodied eval --video)

and calls ``reset(seed)``, instead of wrapping per-env gymnasium objects. Eval envs are always
made with ``auto_reset=False``. The observation keys it reads are ``states`` float32 [B, S],
``main_images`` / ``wrist_images`` uint8 [B, H, W, 3] (as ``env.obs_mode`` asks) and
``task_descriptions`` (B strings; they name each episode's task in the per-task eval breakdown
and are the instruction a VLA policy reads). Eval videos need nothing more than ``render()``:
``RecordingBatchedEnv`` renders every env after reset and after each chunk step (a batched env
runs a chunk's sub-steps itself, so its videos have one frame per chunk step), and with
``auto_reset=False`` the last frame is the terminal state. An implementation may instead offer
``record`` / ``take_recordings`` / ``recording_error`` itself, as ``ChunkedVectorEnv`` does, for
a frame per sub-step. ``embodied check-env ID`` validates an implementation against the contract.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from collections.abc import Sequence
from typing import Any

from embodied.core.types import TASK_DESCRIPTIONS, ChunkStepResult, EpisodeFrames, Obs


@runtime_checkable
class BatchedEnv(Protocol):
    """What an env worker needs of a simulator: a batch of envs with chunked actions."""

    batched: ClassVar[bool]
    num_envs: int
    single_observation_space: gym.spaces.Dict
    single_action_space: gym.spaces.Box

    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; env ``i`` gets ``seed + i``. Returns the batched first observation."""

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Run one action chunk float32 [B, C, A] under the chunk-step contract."""

    def render(self) -> list[np.ndarray]:
        """One uint8 [H, W, 3] frame per env."""

    def close(self) -> None:
        """Free simulator resources."""


def check_chunk_actions(actions: np.ndarray, num_envs: int, action_dim: int, name: str) -> np.ndarray:
    """``actions`` as float32 [num_envs, C, action_dim] with C >= 1 and every entry finite, or a ValueError naming
    ``name`` (the env) and what is wrong: the chunk-step contract's input check, shared by every implementation."""
    actions = np.asarray(actions, dtype=np.float32)
    expected = f"[{num_envs}, C, {action_dim}]"
    if actions.ndim != 3 or actions.shape[0] != num_envs or actions.shape[2] != action_dim:
        raise ValueError(f"{name}: actions must have shape {expected} (C >= 1), got {list(actions.shape)}")
    if actions.shape[1] < 1:
        raise ValueError(f"{name}: action chunk length must be >= 1, got shape {list(actions.shape)}")
    if not np.isfinite(actions).all():
        bad = np.argwhere(~np.isfinite(actions))[0].tolist()
        raise ValueError(f"{name}: actions contain NaN or inf (first at [env, step, dim] = {bad})")
    return actions


def is_batched(target: object) -> bool:
    """Whether a registered env entry point implements ``BatchedEnv`` itself."""
    return bool(getattr(target, "batched", False))


class RecordingBatchedEnv:
    """Eval videos for a ``BatchedEnv`` without ``record()``: frames from its ``render()``.

    Everything else is passed through to the wrapped env. A frame is rendered after ``reset`` and
    after every chunk step while some watched env's episode runs; a render error switches
    recording off (``recording_error``) and never stops the stepping.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.watched: frozenset[int] = frozenset()
        self.active: dict[int, EpisodeFrames] = {}
        self.finished: list[EpisodeFrames] = []
        self.recording_error: str | None = None
        self._tasks: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | None = None) -> Obs:
        obs = self.env.reset(seed=seed)
        self._tasks = [str(t) for t in obs.get(TASK_DESCRIPTIONS, [""] * self.env.num_envs)]
        self.active = {}  # unfinished recordings are cut short by a reset
        return obs

    def record(self, envs: Sequence[int]) -> None:
        """Record the episodes of ``envs`` from their current state on (``()`` stops); call after reset."""
        self.watched, self.active, self.recording_error = frozenset(int(i) for i in envs), {}, None
        if self.watched and getattr(self.env, "auto_reset", False):
            self.recording_error = (f"{type(self.env).__name__}: recording needs auto_reset=False (eval envs): with "
                                    "auto_reset the frame after a chunk shows the next episode")
            self.watched = frozenset()
            return
        self.active = {i: EpisodeFrames(i, self._tasks[i] if i < len(self._tasks) else "") for i in self.watched}
        self._add_frames({i: (0.0, False) for i in self.active})

    def chunk_step(self, actions: Any) -> ChunkStepResult:
        result = self.env.chunk_step(actions)
        if self.active:
            ended = {e.env_index: e for e in result.episodes}
            self._add_frames({i: (float(result.rewards[i].sum()), bool(i in ended and ended[i].success_at_end))
                              for i in self.active})
            for i in [i for i in self.active if result.dones[i]]:
                self.finished.append(self.active.pop(i))
        return result

    def take_recordings(self) -> list[EpisodeFrames]:
        done, self.finished = self.finished, []
        return done

    def _add_frames(self, steps: dict[int, tuple[float, bool]]) -> None:
        try:
            frames = self.env.render()
            if frames is None or len(frames) != self.env.num_envs:
                raise RuntimeError(f"render() must return one frame per env ({self.env.num_envs}), got "
                                   f"{None if frames is None else len(frames)}")
        except Exception as exc:  # noqa: BLE001 - a broken renderer must not stop the episode
            self.recording_error = f"{type(self.env).__name__}: rendering failed, recording switched off: {exc!r}"
            self.watched, self.active = frozenset(), {}
            return
        for i, (reward, success) in steps.items():
            rec = self.active[i]
            rec.frames.append(np.array(frames[i], dtype=np.uint8, copy=True))
            rec.rewards.append(reward)
            rec.successes.append(success)

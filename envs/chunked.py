"""``ChunkedVectorEnv``: M gymnasium envs stepped one action chunk at a time.

This file is the single owner of the chunk-step contract (see ``embodied.core.types.ChunkStepResult``):

- ``chunk_step(actions float32[B, C, A])`` runs, for every env, its C sub-actions in order and
  stops at the sub-step where that env's episode ends (termination or truncation).
- ``rewards``/``terminations``/``truncations`` are per sub-step, 0/False where not executed;
  ``executed`` says which sub-steps really ran; ``dones[b]`` says the episode ended in the chunk.
- ``auto_reset=True``: a done env is reset at the chunk boundary, ``obs`` is the new episode's
  first observation and ``final_obs`` holds the terminal one (``None`` when no env is done).
- ``auto_reset=False`` (GRPO, eval): a done env stays done, its ``obs`` stays terminal and its later
  chunks execute nothing, until ``reset()``.
- ``episodes`` lists return, length, ``success_once``, ``success_at_end`` and the task of envs done in the chunk.

``expert_chunk_step(C)`` is the same step with each env's scripted expert choosing every sub-action
on the state the previous one left (closed loop); it also returns the actions executed (for
demonstrations). ``labelled_chunk_step(actions)`` runs the policy's chunk and asks the expert for its action
on every state visited (``expert_actions``), optionally letting the expert act a whole chunk with a given
probability (DAgger's mixture). All run the one per-env loop, ``_run_chunk``.

``record(envs)`` keeps a rendered frame of every executed sub-step of those envs' episodes (the
terminal frame is rendered before any reset); ``take_recordings()`` hands over finished episodes.

Wrapped envs are plain gymnasium envs that end their own episodes (``max_episode_steps``); this
class does no gymnasium-style autoreset, so no suite's reset convention leaks through it.
"""

from __future__ import annotations

import contextlib
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from embodied.core import pickles
from embodied.core.numerics import NonFiniteError
from embodied.core.types import TASK_DESCRIPTIONS, ChunkStepResult, EnvError, EpisodeFrames, EpisodeStats, Obs
from embodied.envs.batched import check_chunk_actions


@dataclass
class _Episode:
    """Running statistics of one env's current episode."""

    ret: float = 0.0
    length: int = 0
    success_once: bool = False
    success_last: bool = False
    task: str = ""
    sim_unstable: bool = False

    def record(self, reward: float, success: bool, sim_unstable: bool = False) -> None:
        self.ret += reward
        self.length += 1
        self.success_once |= success
        self.success_last = success
        self.sim_unstable |= sim_unstable


class _Recorder:
    """Frames of the current episodes of watched envs, and the finished ones not yet taken.

    A render error switches recording off (``error`` says why) and never stops the stepping.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.watched: frozenset[int] = frozenset()
        self.active: dict[int, EpisodeFrames] = {}
        self.finished: list[EpisodeFrames] = []
        self.error: str | None = None

    def watch(self, envs: Sequence[int]) -> None:
        """Record the episodes of ``envs`` from now on (dropping unfinished recordings)."""
        self.watched = frozenset(int(i) for i in envs)
        self.active, self.error = {}, None

    def start(self, i: int, env: gym.Env, task: str, success: bool) -> None:
        """Begin env ``i``'s episode (if watched) with a frame of its current state."""
        self.active.pop(i, None)  # an unfinished episode cut short by reset() is dropped
        if i in self.watched:
            self.active[i] = EpisodeFrames(i, task)
            self.add(i, env, 0.0, success)

    def add(self, i: int, env: gym.Env, reward: float, success: bool) -> None:
        rec = self.active.get(i)
        if rec is None:
            return
        try:
            frame = env.render()
            if frame is None:
                raise RuntimeError("render() returned None; make the env with render_mode='rgb_array'")
        except Exception as exc:  # noqa: BLE001 - a broken renderer must not stop the episode
            self.error = f"{self.name}: rendering failed, recording switched off: {exc!r}"
            self.watched, self.active = frozenset(), {}
            return
        rec.frames.append(np.array(frame, dtype=np.uint8, copy=True))  # envs may reuse their buffer
        rec.rewards.append(reward)
        rec.successes.append(success)

    def finish(self, i: int) -> None:
        rec = self.active.pop(i, None)
        if rec is not None:
            self.finished.append(rec)


class ChunkedVectorEnv:
    """Vector of gymnasium envs with chunked actions, auto-reset at chunk boundaries and episode stats."""

    batched: ClassVar[bool] = True  # implements embodied.envs.batched.BatchedEnv

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *, auto_reset: bool = True, name: str = "env",
                 build_threads: int = 1, progress: bool = False, env_ids: Sequence[str] | None = None) -> None:
        """``build_threads > 1`` builds envs concurrently (simulators that take seconds to build spend
        much of it outside the GIL: XML parsing, MuJoCo's compiler); ``progress`` shows a bar. ``env_ids``
        (an env mixture) names each env's member, carried by its episodes' ``EpisodeStats.env_id``."""
        if len(env_fns) < 1:
            raise ValueError(f"{name}: a ChunkedVectorEnv needs at least one env, got {len(env_fns)}")
        if env_ids is not None and len(env_ids) != len(env_fns):
            raise ValueError(f"{name}: {len(env_ids)} env ids for {len(env_fns)} envs")
        self.name = name
        self.env_ids = list(env_ids) if env_ids is not None else [""] * len(env_fns)
        self.auto_reset = auto_reset
        self.envs = self._build(env_fns, build_threads, progress)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        if not isinstance(self.single_action_space, gym.spaces.Box) or len(self.single_action_space.shape) != 1:
            raise TypeError(f"{name}: actions must be a 1-D Box space, got {self.single_action_space}")
        self.action_dim = int(self.single_action_space.shape[0])
        self._obs: list[dict] = []
        self._episodes = [_Episode() for _ in self.envs]
        self._finished = np.zeros(self.num_envs, dtype=bool)
        self._recorder = _Recorder(name)
        self._experts: list | None = None  # scripted experts, made on the first expert_chunk_step
        # (time.monotonic(), env index, sub-step or -1 outside a chunk, "step" | "reset" | "render") of the env
        # call in progress or last made: an env worker's watchdog reads it to name the env that hangs
        # (env.step_timeout_s), a render() for a video frame included.
        self.progress: tuple[float, int, int, str] | None = None

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    def _build(self, env_fns: Sequence[Callable[[], gym.Env]], threads: int, progress: bool) -> list[gym.Env]:
        """Every env, in order; if one fails, the ones built are closed and its ``EnvError`` raised."""
        from tqdm.auto import tqdm

        bar = tqdm(total=len(env_fns), desc=f"building {self.name}", unit="env", disable=not progress, leave=False)
        built: dict[int, gym.Env] = {}

        def build(i: int) -> None:
            built[i] = self._guard(i, "construction", env_fns[i])
            bar.update(1)

        try:
            if threads <= 1:
                for i in range(len(env_fns)):
                    build(i)
            else:
                with ThreadPoolExecutor(threads, thread_name_prefix="env-build") as pool:
                    for future in [pool.submit(build, i) for i in range(len(env_fns))]:
                        future.result()
        except BaseException:
            for env in built.values():
                with contextlib.suppress(Exception):
                    env.close()
            raise
        finally:
            bar.close()
        return [built[i] for i in range(len(env_fns))]

    def get_state(self) -> bytes:
        """The envs mid-episode (simulator, RNG, task), their running episode stats and current
        observations, pickled; ``set_state`` puts them back (exact resume). Raises if an env cannot
        be pickled (e.g. it holds an open socket or GL context)."""
        return pickle.dumps((self.envs, self._episodes, self._obs, self._finished))

    def set_state(self, state: bytes) -> None:
        """Replace the envs by the ones ``get_state`` saved (the current ones are closed)."""
        envs, episodes, obs, finished = pickles.loads(state)  # noqa: S301 - the run's own checkpoint
        if len(envs) != self.num_envs:
            raise ValueError(f"{self.name}: the saved state holds {len(envs)} envs, this batch has {self.num_envs}")
        self.close()
        self.envs, self._episodes, self._obs, self._finished = envs, episodes, obs, finished
        self._experts = None  # remade for the restored envs on the next expert step

    @property
    def finished(self) -> np.ndarray:
        """bool [B]: envs whose episode is over and not yet reset (only with ``auto_reset=False``)."""
        return self._finished.copy()

    def reset(self, seed: int | None = None, seeds: Sequence[int] | None = None,
              options: Sequence[dict[str, Any] | None] | None = None) -> Obs:
        """Reset every env (env ``i`` gets ``seed + i``, or ``seeds[i]``, and ``options[i]``, e.g. a
        suite's fixed eval episode); the batched first observation."""
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"{self.name}: {len(seeds)} seeds for {self.num_envs} envs")
        if options is not None and len(options) != self.num_envs:
            raise ValueError(f"{self.name}: {len(options)} reset options for {self.num_envs} envs")
        per_env = list(seeds) if seeds is not None else [None if seed is None else seed + i for i in range(self.num_envs)]
        opts = list(options) if options is not None else [None] * self.num_envs
        self._obs = [self._reset_one(i, per_env[i], opts[i]) for i in range(self.num_envs)]
        self._finished[:] = False
        return self._batch(self._obs)

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Run one action chunk per env; see the module docstring for the contract."""
        if not self._obs:
            raise RuntimeError(f"{self.name}: call reset() before chunk_step()")
        actions = check_chunk_actions(actions, self.num_envs, self.action_dim, self.name)
        return self._run_chunk(actions.shape[1], lambda i, c: actions[i, c])

    def expert_chunk_step(self, chunk: int, noise: float = 0.0,
                          rng: np.random.Generator | None = None) -> tuple[ChunkStepResult, np.ndarray]:
        """One chunk of ``chunk`` sub-steps per env from each env's scripted expert (``envs.experts``).

        The expert is closed-loop: it acts on the state after every sub-step. Returns the result
        (the same contract as ``chunk_step``) and the expert's actions, float32 [B, C, A] (0 where
        a sub-step did not run): what a demonstration records. With ``noise > 0`` (DART, Laskey et
        al. 2017) the env executes the expert's action plus Gaussian noise of ``noise`` x half the
        action range (drawn from ``rng``, clipped to the bounds), while the recorded action stays
        the expert's: the demonstrations then show how to recover from the small errors a cloned
        policy makes.
        """
        if not self._obs:
            raise RuntimeError(f"{self.name}: call reset() before expert_chunk_step()")
        if chunk < 1:
            raise ValueError(f"{self.name}: action chunk length must be >= 1, got {chunk}")
        if noise < 0:
            raise ValueError(f"{self.name}: expert action noise must be >= 0, got {noise}")
        experts = self.experts
        taken = np.zeros((self.num_envs, chunk, self.action_dim), dtype=np.float32)
        space = self.single_action_space
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        scale = np.float32(noise) * (high - low) / 2
        rng = rng if rng is not None else np.random.default_rng()

        def expert_action(i: int, c: int) -> np.ndarray:  # asked once per executed sub-step
            taken[i, c] = experts[i].act(self.envs[i].unwrapped, self._obs[i])
            if not noise:
                return taken[i, c]  # float32: what is recorded is exactly what ran
            return np.clip(taken[i, c] + scale * rng.standard_normal(self.action_dim).astype(np.float32), low, high)

        return self._run_chunk(chunk, expert_action), taken

    def labelled_chunk_step(self, actions: np.ndarray, expert_mix: float = 0.0,
                            rng: np.random.Generator | None = None) -> ChunkStepResult:
        """``chunk_step`` with every executed sub-step also labelled by the env's scripted expert (``envs.experts``):
        ``result.expert_actions`` float32 [B, C, A] is the expert's action on the state that sub-step started from
        (0 where it did not run), what imitation from visited states (DAgger) trains on. With ``expert_mix`` > 0,
        each env's whole chunk is the expert's (closed loop, as ``expert_chunk_step``) with that probability
        (drawn from ``rng``): Ross et al.'s mixture policy, ``beta * expert + (1 - beta) * policy``. The expert
        acts on every sub-step either way, so its internal state follows the episode; an expert whose phase is
        internal re-derives it from the state first where the policy drove (``resync``, if it has one)."""
        if not self._obs:
            raise RuntimeError(f"{self.name}: call reset() before labelled_chunk_step()")
        if not 0.0 <= expert_mix <= 1.0:
            raise ValueError(f"{self.name}: expert_mix must be in [0, 1], got {expert_mix}")
        actions = check_chunk_actions(actions, self.num_envs, self.action_dim, self.name)
        experts = self.experts
        labels = np.zeros_like(actions)
        rng = rng if rng is not None else np.random.default_rng()
        by_expert = rng.random(self.num_envs) < expert_mix if expert_mix > 0 else np.zeros(self.num_envs, bool)

        def action(i: int, c: int) -> np.ndarray:  # asked once per executed sub-step, on the state it starts from
            env = self.envs[i].unwrapped
            if not by_expert[i] and hasattr(experts[i], "resync"):  # a state the policy drove into
                experts[i].resync(env)
            labels[i, c] = experts[i].act(env, self._obs[i])
            return labels[i, c] if by_expert[i] else actions[i, c]

        result = self._run_chunk(actions.shape[1], action)
        result.expert_actions = labels
        return result

    @property
    def experts(self) -> list:
        """One scripted expert per env (``embodied.envs.experts``), made and reset on first use."""
        if self._experts is None:
            from embodied.envs.experts import expert_for

            self._experts = [expert_for(env) for env in self.envs]
            for expert, env in zip(self._experts, self.envs):
                expert.reset(env.unwrapped)
        return self._experts

    def _run_chunk(self, chunk: int, action_for: Callable[[int, int], np.ndarray]) -> ChunkStepResult:
        """The chunk-step contract, sub-action ``c`` of env ``i`` being ``action_for(i, c)``.

        ``action_for`` is asked once per executed sub-step, just before it runs, so it can act on
        the state the previous one left (``self._obs[i]``).
        """
        num_envs = self.num_envs
        rewards = np.zeros((num_envs, chunk), dtype=np.float32)
        terminations = np.zeros((num_envs, chunk), dtype=bool)
        truncations = np.zeros((num_envs, chunk), dtype=bool)
        executed = np.zeros((num_envs, chunk), dtype=bool)
        dones = np.zeros(num_envs, dtype=bool)
        final: dict[int, dict] = {}
        episodes: list[EpisodeStats] = []
        for i, env in enumerate(self.envs):
            if self._finished[i]:
                continue  # auto_reset off: a done env executes nothing until reset()
            for c in range(chunk):
                action = action_for(i, c)
                self.progress = (time.monotonic(), i, c, "step")
                try:
                    obs, reward, terminated, truncated, info = env.step(action)
                except Exception as exc:
                    raise EnvError(self.name, i, f"step() at sub-step {c} of the chunk", user_traceback(exc)) from exc
                bad = _non_finite(obs, reward)
                if bad:  # where it first appears: later sub-steps of the chunk may hide it
                    raise NonFiniteError(self.name, i, f"sub-step {c} of the chunk",
                                         f"a non-finite {'terminal ' if terminated or truncated else ''}{bad}")
                unstable = sim_unstable(env, info)
                truncated = truncated or (unstable and not terminated)  # an unstable episode ends here
                executed[i, c], rewards[i, c] = True, reward
                terminations[i, c], truncations[i, c] = terminated, truncated
                self._obs[i] = obs
                success = bool(info.get("success", False))
                self._episodes[i].record(float(reward), success, unstable)
                self._rendering(i, c)
                self._recorder.add(i, env, float(reward), success)
                if terminated or truncated:
                    dones[i] = True
                    break
            if dones[i]:
                episodes.append(self._close_episode(i))
                self._recorder.finish(i)  # before the reset: the terminal frame stays in the video
                final[i] = {k: np.array(v, copy=True) for k, v in self._obs[i].items()}  # reset may reuse buffers
                if self.auto_reset:
                    self._obs[i] = self._reset_one(i, None)
                else:
                    self._finished[i] = True
        next_obs = self._batch(self._obs)
        final_obs = None
        if final:
            # Rows of envs not done repeat their next obs so that the batch stays rectangular.
            final_obs = self._batch([final.get(i, o) for i, o in enumerate(self._obs)])
        return ChunkStepResult(next_obs, rewards, terminations, truncations, executed, dones, final_obs, episodes)

    def render(self) -> list[np.ndarray]:
        """One RGB frame per env (needs envs made with ``render_mode='rgb_array'``)."""
        return [env.render() for env in self.envs]

    def record(self, envs: Sequence[int]) -> None:
        """Record the episodes of envs ``envs`` from their current state on (``()`` stops).

        Each recorded episode starts with a frame of its current state and adds one per executed
        sub-step; envs must be made with ``render_mode='rgb_array'``. With ``auto_reset`` the next
        episodes of those envs are recorded too. Call it right after ``reset()``.
        """
        self._recorder.watch(envs)
        for i in sorted(self._recorder.watched):
            self._rendering(i, -1)
            self._recorder.start(i, self.envs[i], self._episodes[i].task, self._episodes[i].success_last)

    def take_recordings(self) -> list[EpisodeFrames]:
        """The recorded episodes that finished since the last call, in the order they finished."""
        done, self._recorder.finished = self._recorder.finished, []
        return done

    @property
    def recording_error(self) -> str | None:
        """Why recording was switched off (a render error), or None."""
        return self._recorder.error

    def close(self) -> None:
        for env in self.envs:
            env.close()

    # -- internals ---------------------------------------------------------------------------

    def _reset_one(self, i: int, seed: int | None, options: dict[str, Any] | None = None) -> dict:
        env = self.envs[i]
        self.progress = (time.monotonic(), i, -1, "reset")
        extra = {} if options is None else {"options": options}  # envs that take no options still reset
        obs, info = self._guard(i, f"reset(seed={seed}{f', options={options}' if extra else ''})", env.reset,
                                seed=seed, **extra)
        if self._experts is not None:
            self._experts[i].reset(env.unwrapped)
        self._episodes[i] = _Episode(task=str(getattr(env.unwrapped, "task_description", "")))
        self._rendering(i, -1)
        self._recorder.start(i, env, self._episodes[i].task, bool(info.get("success", False)))
        return obs

    def _rendering(self, i: int, sub_step: int) -> None:
        """Mark a video frame of env ``i`` about to be rendered (if it is recorded), for the watchdog."""
        if i in self._recorder.active or i in self._recorder.watched:
            self.progress = (time.monotonic(), i, sub_step, "render")

    def _guard(self, i: int, during: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(...)`` for env ``i``; an exception becomes an ``EnvError`` carrying the env's own traceback."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise EnvError(self.name, i, during, user_traceback(exc)) from exc

    def _close_episode(self, i: int) -> EpisodeStats:
        ep = self._episodes[i]
        return EpisodeStats(i, ep.ret, ep.length, ep.success_once, ep.success_last, ep.task, ep.sim_unstable,
                            self.env_ids[i])

    def _batch(self, per_env: list[dict]) -> Obs:
        out: Obs = {key: np.stack([o[key] for o in per_env]) for key in per_env[0]}
        out[TASK_DESCRIPTIONS] = [ep.task for ep in self._episodes]  # read once per episode, at its reset
        return out


def _non_finite(obs: Any, reward: Any) -> str:
    """What of one env's step is NaN/inf ("" if nothing): its reward, or a float observation key."""
    if not np.isfinite(reward):
        return f"reward ({reward})"
    for key, value in (obs.items() if isinstance(obs, dict) else (("obs", obs),)):
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return f"observation ({key} holds NaN or inf)"
    return ""


def sim_unstable(env: gym.Env, info: dict) -> bool:
    """``info["sim_unstable"]``, or, for any env simulating with MuJoCo, its own instability warnings."""
    if info.get("sim_unstable"):
        return True
    data = getattr(env.unwrapped, "data", None)
    if type(data).__name__ != "MjData":
        return False
    from embodied.envs.mujoco_state import mujoco_unstable

    return mujoco_unstable(data)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` from the first frame outside this module on: the env's own code."""
    frames = traceback.extract_tb(exc.__traceback__)
    here = __file__
    while frames and frames[0].filename == here:
        frames.pop(0)
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "Traceback (the env's own, most recent call last):\n" + "".join(lines)

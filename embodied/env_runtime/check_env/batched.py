"""Checks of a ``BatchedEnv`` (a user's batched simulator, or a built-in task's batched twin) through ``chunk_step``."""

from __future__ import annotations

from typing import Any

import numpy as np

from embodied.core.types import TASK_DESCRIPTIONS, ChunkStepResult, Obs
from embodied.env_runtime.check_env.diagnosis import CheckFailed, describe_target
from embodied.env_runtime.check_env.load import build_env, closing
from embodied.env_runtime.check_env.observations import (check_frames, check_obs, check_spaces, difference, kind_of,
                                                         nonfinite, obs_arrays, random_actions)
from embodied.env_runtime.check_env.rows import LOAD, Checks


class BatchedChecks(Checks):
    num_envs = 2
    venv: Any
    first: Obs  # the observations of reset(seed)
    ended: np.ndarray | None = None  # bool [B]: envs that ended an episode within max_episode_steps

    def run_all(self) -> None:
        r = self.rows
        r.run(LOAD, self.load)
        r.run("spaces", self.spaces)
        r.run("observations: keys, dtypes, shapes, finite", self.observations)
        r.run("reset-seed determinism", self.determinism)
        r.run("chunk-step rules and final_obs (auto_reset on)", self.chunk_rules)
        r.run("episode ends within max_episode_steps", self.time_limit)
        r.run("auto_reset=False: done envs stay done", self.stay_done)
        r.run("action bounds", self.action_bounds)
        if self.render_check != "skip":
            r.run("render() frames for videos", self.render, stop_on_crash=False)
        if not self.fast:
            r.run("task_descriptions", self.task_descriptions, stop_on_crash=False)

    def load(self) -> str:
        self.venv = self.stack.enter_context(closing(build_env(self.cfg, self.target, self.num_envs, auto_reset=True)))
        self.first = self.venv.reset(seed=self.seed)
        if not isinstance(self.first, dict):
            raise CheckFailed(f"reset(seed) returned {kind_of(self.first)}, not a dict of batched observations",
                              "return {'states': float32 [B, S], ..., 'task_descriptions': [B str]}", stop=True)
        return f"{describe_target(self.target)} (BatchedEnv), num_envs={self.num_envs}"

    def spaces(self) -> str:
        missing = [a for a in ("single_observation_space", "single_action_space") if not hasattr(self.venv, a)]
        if missing:
            raise CheckFailed(f"the BatchedEnv has no {' or '.join(missing)}", "set single_observation_space "
                              "(gymnasium.spaces.Dict of one env's observation) and single_action_space (1-D float32 "
                              "Box) in __init__, see embodied/envs/batched.py", stop=True)
        return check_spaces(self.venv.single_observation_space, self.venv.single_action_space)

    def observations(self) -> str:
        check_obs(self.first, self.num_envs, "reset", self.venv.single_observation_space)
        return ", ".join(f"{k} {np.asarray(v).dtype}{list(np.asarray(v).shape)}" for k, v in self.first.items()
                         if k != TASK_DESCRIPTIONS)

    def determinism(self) -> str:
        fix = ("seed env i's generator with seed + i in reset(seed) (np.random.default_rng(seed + i)), never "
               "from global state, so that the same checkpoint gives the same eval numbers")
        a, b = self.venv.reset(seed=self.seed), self.venv.reset(seed=self.seed)
        diff = difference(obs_arrays(a), obs_arrays(b))
        if diff:
            raise CheckFailed(f"reset(seed={self.seed}) twice gave different observations ({diff})", fix, warning=True)
        if not self.fast and not difference(obs_arrays(a), obs_arrays(self.venv.reset(seed=self.seed + 1))):
            raise CheckFailed(f"reset with seeds {self.seed} and {self.seed + 1} gave the same observations: "
                              "initial states do not depend on the seed", fix, warning=True)
        return "same seed, same observations"

    def chunk_rules(self) -> str:
        """Random chunks (auto_reset on) until every env has ended an episode, at least ``max_episode_steps + 1``
        sub-steps (``steps`` too outside the fast subset); every result is checked, final_obs included."""
        venv, rng = self.venv, np.random.default_rng(self.seed)
        venv.reset(seed=self.seed)
        limit = self._limit_chunks()
        chunks = limit if self.fast else max(limit, -(-self.steps // self.chunk))
        ended, episodes = np.zeros(self.num_envs, dtype=bool), 0
        for i in range(chunks):
            result = venv.chunk_step(random_actions(venv.single_action_space, self.num_envs, self.chunk, rng))
            check_result(result, self.num_envs, self.chunk, f"chunk {i}")
            episodes += len(result.episodes)
            if i < limit:
                ended |= np.asarray(result.dones, bool)
            if self.fast and ended.all():
                break
        self.ended = ended
        return f"{episodes} episodes ended, final_obs present and finite"

    def _limit_chunks(self) -> int:
        """Chunks that hold max_episode_steps + 1 sub-steps."""
        return -(-(self.cfg.max_episode_steps + 1) // self.chunk)

    def time_limit(self) -> str:
        if self.ended is None:
            raise CheckFailed("not checked: the chunk-step rules above failed", "fix those first", warning=True)
        if not self.ended.all():
            never = np.flatnonzero(~self.ended).tolist()
            raise CheckFailed(f"envs {never} never ended an episode within max_episode_steps="
                              f"{self.cfg.max_episode_steps} sub-steps", "set truncations[b, c] = True at the "
                              "sub-step where env b reaches max_episode_steps (the constructor receives it)")
        return "every env ended an episode"

    def stay_done(self) -> str:
        """With auto_reset=False a done env stays done: later chunks execute nothing for it, until reset()."""
        venv = self.stack.enter_context(closing(build_env(self.cfg, self.target, self.num_envs, auto_reset=False)))
        venv.reset(seed=self.seed)
        rng = np.random.default_rng(self.seed)
        fix = ("with auto_reset=False keep a done env done: executed, rewards, terminations, truncations and dones "
               "all False/0 for it in every later chunk, no episode record, until reset() (eval and GRPO rely on it)")
        done = np.zeros(self.num_envs, dtype=bool)
        for i in range(self._limit_chunks() + 2):
            result = venv.chunk_step(random_actions(venv.single_action_space, self.num_envs, self.chunk, rng))
            check_result(result, self.num_envs, self.chunk, f"chunk {i}")
            again = done & (np.asarray(result.executed).any(1) | np.asarray(result.dones, bool)
                            | (np.asarray(result.rewards) != 0).any(1))
            if again.any() or any(done[e.env_index] for e in result.episodes):
                b = int(np.flatnonzero(again)[0]) if again.any() else next(e.env_index for e in result.episodes)
                raise CheckFailed(f"chunk {i}: env {b}, done in an earlier chunk, ran again (auto_reset=False "
                                  f"ignored)", fix)
            if done.all():
                return f"done envs executed nothing in chunk {i}"
            done |= np.asarray(result.dones, bool)
        raise CheckFailed(f"not checked: no env ended within max_episode_steps={self.cfg.max_episode_steps} "
                          "(see the episode end row)", "end episodes first", warning=True)

    def action_bounds(self) -> None:
        venv, act = self.venv, self.venv.single_action_space
        venv.reset(seed=self.seed)
        for name, action in (("low", act.low), ("high", act.high)):
            actions = np.broadcast_to(np.asarray(action, np.float32), (self.num_envs, self.chunk, *act.shape))
            result = venv.chunk_step(np.array(actions))
            bad = nonfinite(obs_arrays(result.obs))
            if bad or not np.isfinite(np.asarray(result.rewards)).all():
                raise CheckFailed(f"chunks of the action space's {name} bound gave {bad or 'NaN/inf rewards'}",
                                  "clip actions to the action space inside chunk_step()")

    def render(self) -> str:
        fix = ("take render_mode=None in the constructor (the framework passes 'rgb_array' when videos are on) and "
               "return one uint8 [H, W, 3] frame per env from render()")
        try:
            venv = self.stack.enter_context(closing(build_env(self.cfg, self.target, self.num_envs, auto_reset=False,
                                                              render_mode="rgb_array")))
        except CheckFailed as exc:
            raise CheckFailed(f"eval videos need frames: {exc}", fix, warning=self.render_check != "require") from None
        venv.reset(seed=self.seed)
        batches = [venv.render()]
        venv.chunk_step(random_actions(venv.single_action_space, self.num_envs, self.chunk,
                                       np.random.default_rng(self.seed)))
        batches.append(venv.render())
        for frames in batches:
            if frames is None or len(frames) != self.num_envs:
                raise CheckFailed(f"render() returned {kind_of(frames)}, expected a list of {self.num_envs} frames",
                                  fix, warning=frames is None and self.render_check != "require")
        return check_frames([f for frames in batches for f in frames])

    def task_descriptions(self) -> str:
        tasks = self.first.get(TASK_DESCRIPTIONS)
        if not tasks or not all(tasks):
            raise CheckFailed("observations have no task_descriptions (or empty ones): per-task eval has no task names "
                              "and language policies (VLA) get an empty instruction",
                              "add 'task_descriptions': [one str per env] to every observation", warning=True)
        return repr(sorted(set(tasks)))


def check_result(r: ChunkStepResult, num_envs: int, chunk: int, where: str) -> None:
    fix = "follow embodied.envs.chunked's contract (or wrap per-env gymnasium envs in ChunkedVectorEnv)"
    for name in ("rewards", "terminations", "truncations", "executed"):
        if np.asarray(getattr(r, name)).shape != (num_envs, chunk):
            raise CheckFailed(f"{where}: {name} has shape {np.asarray(getattr(r, name)).shape}, "
                              f"expected ({num_envs}, {chunk})", fix)
    ex = np.asarray(r.executed, bool)
    ended = np.asarray(r.terminations, bool) | np.asarray(r.truncations, bool)
    if (np.diff(ex.astype(int), axis=1) > 0).any():
        raise CheckFailed(f"{where}: executed has a gap (a sub-step ran after one that did not)", fix)
    if (np.asarray(r.rewards)[~ex] != 0).any() or ended[~ex].any():
        raise CheckFailed(f"{where}: rewards or done flags set on sub-steps that did not run", fix)
    if not np.array_equal(np.asarray(r.dones, bool), ended.any(1)):
        raise CheckFailed(f"{where}: dones disagrees with terminations | truncations", fix)
    last = ex.sum(1) - 1
    if any(ended[b].any() and (ended[b].argmax() != last[b]) for b in range(num_envs)):
        raise CheckFailed(f"{where}: sub-actions kept running after the episode ended", fix)
    if len(r.episodes) != int(np.asarray(r.dones).sum()):
        raise CheckFailed(f"{where}: {len(r.episodes)} episode records for {int(np.asarray(r.dones).sum())} dones", fix)
    check_obs(r.obs, num_envs, where)
    if np.asarray(r.dones).any():
        if r.final_obs is None:
            raise CheckFailed(f"{where}: an episode ended but final_obs is None",
                              "return final_obs (the terminal observation of each done env, the next one elsewhere): "
                              "it bootstraps the value on truncation and is the last video frame")
        check_obs(r.final_obs, num_envs, f"{where} final_obs")
    if not np.isfinite(np.asarray(r.rewards)).all():
        raise CheckFailed(f"{where}: rewards contain NaN or inf", "keep rewards finite")

"""Checks of a per-env gymnasium env: one env at a time, then the chunk-step rules through ``ChunkedVectorEnv``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.config import EnvConfig
from embodied.env_runtime.check_env.batched import check_result
from embodied.env_runtime.check_env.diagnosis import CheckFailed, describe_target, own_frames
from embodied.env_runtime.check_env.load import build_env, closing, reset_env
from embodied.env_runtime.check_env.observations import (IMAGE_KEYS, blank_frames, check_frames, check_single_obs,
                                                         check_spaces, difference, kind_of, nonfinite, random_action,
                                                         random_actions)
from embodied.env_runtime.check_env.rows import LOAD, Checks
from embodied.envs.adapters.gymnasium_env import GymnasiumEnv, adapted_target
from embodied.envs.chunked import sim_unstable


@dataclass
class _Trace:
    """A rollout of random actions: every observation (reset first), info and reward, and when it ended."""

    obs: list
    infos: list
    rewards: list
    ended_at: int | None


# The preflight's share of the stability row: a model that random actions make unstable (a timestep too large,
# gains too stiff) goes within a few steps, and a rendering suite such as LIBERO steps at ~0.2 s with its cameras,
# so 100 steps were half a LIBERO run's start-up; `embodied check-env` without --fast runs all of --steps.
FAST_STABILITY_STEPS = 20


class SingleChecks(Checks):
    env: gym.Env
    spy: _InfoSpy | None = None  # the wrapped env's own infos, when the gymnasium adapter is in between
    _trace: _Trace | None = None

    def run_all(self) -> None:
        r = self.rows
        r.run(LOAD, self.load)
        r.run("spaces", self.spaces)
        r.run("step returns (obs, reward, terminated, truncated, info)", self.step_types)
        r.run("observations: keys, dtypes, shapes, finite", self.observations)
        r.run("info['success']", self.success_key)
        r.run("reset-seed determinism", self.determinism)
        r.run("action bounds", self.action_bounds)
        r.run("episode ends within max_episode_steps", self.time_limit)
        r.run("simulation stays stable under random actions", self.stability)
        if self.render_check != "skip":
            r.run("render() frames for videos", self.render, stop_on_crash=False)
        if not self.fast:
            r.run("task_description", self.task_description, stop_on_crash=False)
            r.run("gymnasium check_env", self.gym_check, stop_on_crash=False)
            r.run("chunk-step rules", lambda: _chunk_rules(self.cfg, self.target, self.steps, self.chunk, self.seed))

    def load(self) -> str:
        venv = self.stack.enter_context(closing(build_env(self.cfg, self.target, 1)))
        self.env = venv.envs[0]
        if isinstance(self.env, GymnasiumEnv):  # to see whether the env's own info reports success
            self.spy = self.env.env = _InfoSpy(self.env.env)
        reset_env(self.env, self.seed)
        how = "through the gymnasium adapter" if adapted_target(self.target) is not None else "as it is"
        return f"{describe_target(self.target)}, built {how}"

    def spaces(self) -> str:
        return check_spaces(self.env.observation_space, self.env.action_space)

    def step_types(self) -> None:
        reset_env(self.env, self.seed)
        out = self.env.step(self.env.action_space.sample())
        if not (isinstance(out, tuple) and len(out) == 5):
            raise CheckFailed(f"step() returned {kind_of(out)}",
                              "return (obs, reward, terminated, truncated, info) as gymnasium >= 0.26 does "
                              "(split done into terminated and truncated)", stop=True)
        _, reward, terminated, truncated, info = out
        problems = []
        if not isinstance(reward, (int, float, np.floating, np.integer)) or isinstance(reward, (bool, np.bool_)):
            problems.append(f"reward is {type(reward).__name__}, expected a float")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                problems.append(f"{name} is {type(flag).__name__}, expected bool")
        if not isinstance(info, dict):
            problems.append(f"info is {type(info).__name__}, expected dict")
        if problems:
            raise CheckFailed("; ".join(problems), "return a float reward, bool terminated/truncated and a dict info",
                              stop=True)

    def trace(self) -> _Trace:
        """Random actions from ``reset(seed)`` for up to ``max_episode_steps + 1`` steps (run once, shared)."""
        if self._trace is None:
            env, limit = self.env, self.cfg.max_episode_steps
            obs, info = reset_env(env, self.seed)
            if self.spy is not None:
                self.spy.infos.clear()
            rng = np.random.default_rng(self.seed)
            trace = _Trace([obs], [], [], None)
            for t in range(1, limit + 2):
                obs, reward, terminated, truncated, info = env.step(random_action(env.action_space, rng))
                trace.obs.append(obs)
                trace.infos.append(info)
                trace.rewards.append(reward)
                if terminated or truncated:
                    trace.ended_at = t
                    break
            self._trace = trace
        return self._trace

    def observations(self) -> str:
        trace, space = self.trace(), self.env.observation_space
        for t, obs in enumerate(trace.obs):
            check_single_obs(obs, space, "reset" if t == 0 else f"step {t}")
        for t, reward in enumerate(trace.rewards, 1):
            if not math.isfinite(float(reward)):
                raise CheckFailed(f"step {t}: reward is {reward}", "keep rewards finite")
        for key in IMAGE_KEYS:
            if key in trace.obs[0]:
                blank = blank_frames([o[key] for o in trace.obs])
                if blank:
                    raise CheckFailed(f"{key} {blank}", "check lights and camera pose; with MuJoCo set MUJOCO_GL=egl")
        first = trace.obs[0]
        return ", ".join(f"{k} {np.asarray(v).dtype}{list(np.asarray(v).shape)}" for k, v in first.items())

    def success_key(self) -> None:
        trace = self.trace()
        if self.spy is None:  # embodied's convention: the env's info is read as it is
            infos, keys, fix = trace.infos, ("success",), "put info['success'] = bool(task solved) in every step's info"
        elif self.env.success_key is None:  # the adapter reads 'is_success' or 'success' (and adds 'success')
            infos, keys = self.spy.infos, ("is_success", "success")
            fix = ("put info['is_success'] (or 'success') = bool in every step's info, or name your own key with "
                   "env.kwargs.success_key")
        else:
            return  # env.kwargs.success_key: the adapter raises on a step without it
        missing = next((t for t, info in enumerate(infos, 1) if not any(k in info for k in keys)), None)
        if missing is not None:
            raise CheckFailed(f"step {missing}: info has no {' or '.join(map(repr, keys))} key, so success_rate "
                              f"reads 0 for every episode", fix, warning=True)

    def determinism(self) -> str:
        env, rng = self.env, np.random.default_rng(self.seed + 1)
        actions = [random_action(env.action_space, rng) for _ in range(5)]
        first, again = _replay(env, self.seed, actions), _replay(env, self.seed, actions)
        fix = ("draw all randomness from self.np_random after super().reset(seed=seed) (not np.random or an "
               "unseeded generator), so that the same checkpoint gives the same eval numbers")
        diff = difference(first[0], again[0])
        if diff:
            raise CheckFailed(f"reset(seed={self.seed}) twice gave different first observations ({diff})", fix,
                              warning=True)
        step = next((t for t, (a, b) in enumerate(zip(first, again)) if difference(a, b)), None)
        if step is not None:
            raise CheckFailed(f"the same seed and actions gave different observations at step {step} "
                              f"({difference(first[step], again[step])})", fix, warning=True)
        if not self.fast and not difference(first[0], _replay(env, self.seed + 1, [])[0]):
            raise CheckFailed(f"reset with seeds {self.seed} and {self.seed + 1} gave the same first observation: "
                              "initial states do not depend on the seed", "randomize initial states with "
                              "self.np_random (ignore this if the task has one fixed start)", warning=True)
        return "same seed, same observations"

    def action_bounds(self) -> None:
        env = self.env
        if any(nonfinite(obs) for obs in self.trace().obs):
            raise CheckFailed("not checked: observations are NaN/inf under in-bound random actions already",
                              "see the observations row", warning=True)
        reset_env(env, self.seed)
        act = env.action_space
        for action in (act.low, act.high, (act.low + act.high) / 2, act.high * 2):
            obs, reward, *_ = env.step(action.astype(np.float32))
            bad = nonfinite(obs)
            if bad or not math.isfinite(float(reward)):
                raise CheckFailed(f"action {np.round(action, 3).tolist()} gave {bad or f'reward {reward}'}",
                                  "clip actions to the action space inside step()")

    def time_limit(self) -> str:
        ended, limit = self.trace().ended_at, self.cfg.max_episode_steps
        if ended is not None and ended <= limit:
            return f"ended after {ended} steps"
        raise CheckFailed(
            f"no termination or truncation within max_episode_steps={limit} ({limit + 1} steps of random actions)",
            "set truncated=True once max_episode_steps steps have run (the constructor receives max_episode_steps); "
            "without an end, eval finds 0 episodes and success_rate is nan")

    def stability(self) -> str:
        """``self.steps`` random actions (resetting at episode ends) without the simulator going unstable; the fast
        subset takes ``FAST_STABILITY_STEPS`` of them."""
        env, rng = self.env, np.random.default_rng(self.seed + 2)
        steps = min(self.steps, FAST_STABILITY_STEPS) if self.fast else self.steps
        reset_env(env, self.seed)
        for t in range(1, steps + 1):
            _, _, terminated, truncated, info = env.step(random_action(env.action_space, rng))
            if sim_unstable(env, info):
                raise CheckFailed(
                    f"step {t} of random actions: the simulation went unstable (info['sim_unstable'], or MuJoCo's "
                    f"'Nan, Inf or huge value in QACC/QPOS/QVEL' warning); training would truncate such episodes",
                    "lower the model's timestep (<option timestep=...>), raise damping/armature, soften stiff "
                    "contacts or gains, or clip actions to what the actuators can follow")
            if terminated or truncated:
                reset_env(env, None)
        return f"{steps} random steps"

    def render(self) -> str:
        try:
            venv = self.stack.enter_context(closing(build_env(self.cfg, self.target, 1, render_mode="rgb_array")))
        except CheckFailed as exc:
            raise self._no_frames(str(exc)) from None
        env = venv.envs[0]
        reset_env(env, self.seed)
        rng = np.random.default_rng(self.seed)
        try:
            frames = [env.render()]
            for _ in range(3):
                env.step(random_action(env.action_space, rng))
                frames.append(env.render())
        except NotImplementedError:  # gymnasium.Env's own render(): the class has none
            raise self._no_frames("the env does not implement render()") from None
        if any(f is None for f in frames):
            raise self._no_frames("render() returned None with render_mode='rgb_array'")
        return check_frames(frames)

    def _no_frames(self, why: str) -> CheckFailed:
        fix = ("take render_mode=None in the constructor and, when it is 'rgb_array', return a uint8 [H, W, 3] frame "
               "from render()")
        return CheckFailed(f"eval videos (runner.eval_video, embodied eval --video) need frames: {why}", fix,
                           warning=self.render_check != "require")

    def task_description(self) -> str:
        reset_env(self.env, self.seed)
        value = getattr(self.env.unwrapped, "task_description", None)
        if value is not None and not isinstance(value, str):
            raise CheckFailed(f"task_description is {type(value).__name__} {value!r}, not a str",
                              "set task_description to the episode's instruction, a str")
        if not value:
            fix = ("give the class a task_description attribute (a str, or a method returning one), or set "
                   "env.kwargs.task_description" if adapted_target(self.target) is not None else
                   "set self.task_description = '...' (in reset() if it changes per episode)")
            raise CheckFailed("no task_description: per-task eval has no task names and language policies (VLA) "
                              "get an empty instruction", fix, warning=True)
        return repr(value)

    def gym_check(self) -> None:
        from gymnasium.utils.env_checker import check_env as gym_check_env

        try:
            gym_check_env(self.env.unwrapped, skip_render_check=True)
        except AssertionError as exc:
            if own_frames(exc):
                raise  # an assert in the env's own code: a crash, with its traceback
            raise CheckFailed(f"{exc}", "gymnasium's env checker (gymnasium.utils.env_checker.check_env) names the "
                              "rule", warning="eterministic" in str(exc)) from None


class _InfoSpy(gym.Wrapper):
    """Keeps the infos a wrapped env's own ``step`` returns (the adapter adds 'success' to them)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.infos: list[dict] = []

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.infos.append(dict(out[-1]) if isinstance(out, tuple) and isinstance(out[-1], dict) else {})
        return out


def _replay(env: gym.Env, seed: int, actions: list) -> list:
    obs, _ = reset_env(env, seed)
    trace = [obs]
    for action in actions:
        obs, *_, terminated, truncated, _ = env.step(action)
        trace.append(obs)
        if terminated or truncated:
            break
    return trace


def _chunk_rules(cfg: EnvConfig, target: Any, steps: int, chunk: int, seed: int) -> str:
    """Random chunks through the vector env of 2, checking every rule of the chunk-step contract."""
    rng, episodes, chunks = np.random.default_rng(seed), 0, max(1, steps // chunk)
    with closing(build_env(cfg, target, 2)) as venv:
        venv.reset(seed=seed)
        for i in range(chunks):
            result = venv.chunk_step(random_actions(venv.single_action_space, 2, chunk, rng))
            check_result(result, 2, chunk, f"chunk {i}")
            episodes += len(result.episodes)
    return f"{chunks} chunks of {chunk}, {episodes} episodes ended"

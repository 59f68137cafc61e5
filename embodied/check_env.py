"""``embodied check-env ID``: validate a simulator against the contracts before training on it.

    embodied check-env Reach-v0 --steps 200
    embodied check-env my_pkg.my_env:MyEnv --obs-mode rgb --kwargs '{"difficulty": 2}'
    embodied check-env my_pkg.my_env:MyEnv --json      # for CI: a list of {name, passed, detail, fix, severity}

Every row is PASS, WARN (the run works, but results degrade: no ``info['success']``, a reset that
ignores its seed, no ``render()`` for videos, no task description) or FAIL with what is wrong and
how to fix it; the exit code is non-zero if any row fails. The env is built exactly as the env
workers build it (``embodied.env_factory``), so a plain gymnasium class is checked through the
gymnasium adapter. An error that stops every check (an import error, a constructor that does not
fit the config, a crash on reset) is one row; a crash inside the env's own code prints the env's
own traceback (file and line) above the table.

A per-env gymnasium env gets: import/construct/reset, spaces, step's 5-tuple, observations (keys,
dtypes, shapes, finite), ``info['success']``, seed determinism, action bounds, the episode ending
within ``max_episode_steps``, ``render()``, ``task_description``, and (not in the ``fast`` subset
that ``embodied train`` / ``embodied eval`` run as their preflight) gymnasium's own ``check_env`` and
the chunk-step rules through ``ChunkedVectorEnv``. A ``BatchedEnv`` gets the same checks through
``chunk_step``, plus ``final_obs`` with ``auto_reset`` on and done envs staying done with it off.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import math
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

import embodied
from embodied.config import ConfigError, EnvConfig
from embodied.env_factory import batched_twin, make_vector_env
from embodied.envs.adapters.gymnasium_env import GymnasiumEnv, adapted_target
from embodied.envs.batched import is_batched
from embodied.envs.chunked import sim_unstable
from embodied.registry import ENVS, PluginError, UnknownNameError
from embodied.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, ChunkStepResult, EnvError, Obs

IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)
KNOWN_KEYS = (STATES, *IMAGE_KEYS)
Severity = Literal["ok", "warning", "error"]
LOAD = "import, construct and reset"  # the row of every error that stops all checks
RenderCheck = Literal["check", "require", "skip"]  # require: videos are on, so no render() is an error


class CheckFailed(Exception):
    """A failed check: ``str(self)`` says what is wrong, ``fix`` how to mend it.

    ``warning``: the run works but its results degrade (reported, not failed). ``stop``: the
    checks after this one cannot run (they would all fail the same way).
    """

    def __init__(self, what: str, fix: str, *, warning: bool = False, stop: bool = False, tb: str = "") -> None:
        super().__init__(what)
        self.fix, self.warning, self.stop, self.tb = fix, warning, stop, tb


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    fix: str = ""
    severity: Severity = "ok"  # "warning" rows pass; "error" rows fail
    traceback: str = ""  # the env's own traceback of a crash (printed above the table)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail, "fix": self.fix,
                "severity": self.severity}


def check_env(cfg: EnvConfig, steps: int = 100, chunk: int = 4, seed: int = 0, fast: bool = False,
              render: RenderCheck = "check") -> list[CheckResult]:
    """Run every check that applies to ``cfg.id`` (``fast``: the preflight's subset) and return one row each."""
    rows = _Rows(cfg)
    with ExitStack() as stack:
        target = rows.run(LOAD, lambda: _resolve(cfg), record=False)
        if rows.stopped:
            return rows.results
        rows.target = target
        kind = _BatchedChecks if is_batched(target) else _SingleChecks
        kind(rows, cfg, target, stack, seed=seed, steps=steps, chunk=chunk, fast=fast, render=render).run_all()
        twin = batched_twin(target, cfg)  # the path env workers take by default: its rows follow the per-env ones
        if twin is not None and not rows.stopped:
            _BatchedChecks(rows, cfg, twin, stack, seed=seed, steps=steps, chunk=chunk, fast=fast,
                           render=render).run_all()
    return rows.results


class _Rows:
    """Runs checks in order, one row each; a stopping failure or a crash in the env ends the run."""

    def __init__(self, cfg: EnvConfig) -> None:
        self.cfg, self.target = cfg, None
        self.results: list[CheckResult] = []
        self.stopped = False

    def run(self, name: str, fn: Callable[[], Any], stop_on_crash: bool = True, record: bool = True) -> Any:
        """``fn()``'s value (a str is the row's detail); None when it failed or the run has stopped.

        A crash (an exception that is not a ``CheckFailed``) stops the run unless ``stop_on_crash`` is off;
        ``record=False`` adds a row only for a failure.
        """
        if self.stopped:
            return None
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = fn()
            # Gymnasium raises on contract breaks and warns on recommendations: show those, pass.
            notes = sorted({_plain(str(w.message)) for w in caught if issubclass(w.category, UserWarning)})
            detail = value if isinstance(value, str) else ""
            if record:
                self.results.append(CheckResult(name, True, "; ".join(filter(None, [detail, *notes]))))
            return value
        except CheckFailed as exc:
            severity: Severity = "warning" if exc.warning else "error"
            self.results.append(CheckResult(name, exc.warning, str(exc), exc.fix, severity, exc.tb))
            self.stopped = exc.stop
        except Exception as exc:  # noqa: BLE001 - a crash is a finding to report, not to raise
            known = _known_failure(exc, self.cfg, self.target)
            if known is not None:
                self.results.append(CheckResult(name, False, str(known), known.fix, "error", known.tb))
                self.stopped = known.stop and stop_on_crash
            else:
                self.results.append(_crash_row(name, exc, self.cfg, self.target))
                self.stopped = stop_on_crash
        return None


# -- loading: import, construct, reset --------------------------------------------------------------


def _resolve(cfg: EnvConfig) -> Any:
    try:
        target = ENVS.resolve(cfg.id)
    except (UnknownNameError, ImportError, PluginError) as exc:
        raise _load_failure(exc, cfg, None) from exc
    missing = [m for m in ("reset", "step") if not callable(getattr(target, m, None))]
    if isinstance(target, type) and not is_batched(target) and not issubclass(target, gym.Env) and missing:
        raise CheckFailed(f"{describe_target(target)} is not a gymnasium env: it subclasses neither gymnasium.Env "
                          f"nor BatchedEnv, and has no {' or '.join(f'{m}()' for m in missing)}",
                          "make it a gymnasium.Env subclass (observation_space, action_space, reset(seed=...) -> "
                          "(obs, info), step(action) -> (obs, reward, terminated, truncated, info)), or a BatchedEnv "
                          "(class attribute batched = True, see embodied/envs/batched.py)", stop=True)
    return target


def _build(cfg: EnvConfig, target: Any, num_envs: int, render_mode: str | None = None, **changes: Any) -> Any:
    """The vector env the env workers would build (``make_vector_env``); errors that stop every check are named."""
    if not is_batched(target):  # a class with a batched twin is checked per env here, its twin on its own
        changes = {"vectorization": "per_env", **changes}
    cfg = dataclasses.replace(cfg, **changes) if changes else cfg
    try:
        return make_vector_env(cfg, num_envs, render_mode=render_mode, name=cfg.id)
    except Exception as exc:
        known = _known_failure(exc, cfg, target)
        if known is None:
            raise
        raise known from exc


def _known_failure(exc: BaseException, cfg: EnvConfig, target: Any) -> CheckFailed | None:
    """A stopping ``CheckFailed`` for an error that is not a crash inside the env's own code, else None."""
    if isinstance(exc, CheckFailed):
        return exc
    if isinstance(exc, (UnknownNameError, ImportError, PluginError, ConfigError)):
        return _load_failure(exc, cfg, target)
    cause = _unwrap(exc)
    if isinstance(cause, TypeError) and not _own_frames(cause) and _is_call_error(cause):
        return _call_failure(cause, target)
    if isinstance(cause, ValueError) and str(cause).startswith(("env.", "eval_env.")):
        # An env refusing a config value names the field (``env.kwargs.task_ids: ...``): a config error, not a crash.
        return CheckFailed(str(cause), "correct that field of the config (the message names it and what is valid)",
                           stop=True)
    return None


def _load_failure(exc: BaseException, cfg: EnvConfig, target: Any) -> CheckFailed:
    if isinstance(exc, UnknownNameError):
        return CheckFailed(str(exc), "register the env (ENVS.register) or name it as 'package.module:Class'",
                           stop=True)
    if isinstance(exc, ImportError):
        return _import_failure(exc, cfg)
    what, fix = _split_fix(str(exc))
    if isinstance(exc, ConfigError):
        signature = f"its constructor is {_signature(target)}"
        return CheckFailed(what, f"{fix}; {signature}" if fix else f"make env.kwargs fit the constructor: {signature}",
                           stop=True)
    return CheckFailed(what, fix or "see the message", stop=True)


def _split_fix(message: str) -> tuple[str, str]:
    """A framework message 'what ... Fix: how' as (what, how); how is '' when the message has no fix."""
    found = re.search(r"[.;,]?\s*\b[Ff]ix:\s*", message)
    return (message[:found.start()], message[found.end():]) if found else (message, "")


def _import_failure(exc: ImportError, cfg: EnvConfig) -> CheckFailed:
    entry = ENVS.entry_point(cfg.id) if cfg.id in ENVS else cfg.id
    module = entry.partition(":")[0] if isinstance(entry, str) else ""
    missing = getattr(exc.__cause__, "name", None) or getattr(exc, "name", None)
    if isinstance(exc.__cause__, ModuleNotFoundError) and missing and (module + ".").startswith(missing + "."):
        top = module.split(".")[0]
        return CheckFailed(
            str(exc), f"python cannot find {missing!r} from {os.getcwd()}: run from the folder that holds {top}/, "
            f"add that folder to PYTHONPATH (PYTHONPATH=/path/to/project embodied ...), or install your project "
            f"into this environment (pip install -e /path/to/project)", stop=True)
    if isinstance(exc.__cause__, ModuleNotFoundError) and missing:
        return CheckFailed(f"{exc} (see the traceback above)",
                           f"{module} imports {missing!r}, which is not installed in {sys.prefix}: "
                           f"pip install {missing.split('.')[0]} (the package that provides it)", stop=True,
                           tb=_traceback_text(exc.__cause__))
    if "has no attribute" in str(exc):
        names = _env_classes(module)
        return CheckFailed(str(exc), f"check the name after ':' in {cfg.id!r}; {module} defines "
                           f"{names or 'no gymnasium.Env class'}", stop=True)
    own = _own_frames(exc)
    return CheckFailed(str(exc) + (" (see the traceback above)" if own else ""),
                       "check the import path 'package.module:Class' and the imports of your module; PYTHONPATH, or "
                       "pip install -e your project", stop=True, tb=_traceback_text(exc) if own else "")


def _env_classes(module: str) -> list[str]:
    mod = sys.modules.get(module)
    return sorted(n for n, v in vars(mod).items() if isinstance(v, type) and v.__module__ == module
                  and (issubclass(v, gym.Env) or is_batched(v))) if mod else []


def _is_call_error(exc: TypeError) -> bool:
    return bool(re.search(r"required (positional|keyword-only) argument|unexpected keyword argument|"
                          r"positional arguments? but", str(exc)))


def _call_failure(exc: TypeError, target: Any) -> CheckFailed:
    if "seed" in str(exc) and "reset" in str(exc):
        return CheckFailed(f"reset() does not take seed=: {exc}", "define reset(self, *, seed=None, options=None) and "
                           "call super().reset(seed=seed) first", stop=True)
    return CheckFailed(f"the constructor cannot be called with the config's arguments: {exc}",
                       f"make env.kwargs fit the constructor: {_signature(target)}", stop=True)


def _reset(env: gym.Env, seed: int | None) -> tuple[Any, dict]:
    out = env.reset(seed=seed)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise CheckFailed(f"reset() returned {_kind(out)}, not (obs, info)",
                          "return (obs, info) from reset() as gymnasium >= 0.26 does", stop=True)
    return out


# -- per-env gymnasium envs -------------------------------------------------------------------------


@dataclass
class _Trace:
    """A rollout of random actions: every observation (reset first), info and reward, and when it ended."""

    obs: list
    infos: list
    rewards: list
    ended_at: int | None


class _Checks:
    """The checks of one kind of env, run in order by ``run_all``; envs they build close with ``stack``."""

    def __init__(self, rows: _Rows, cfg: EnvConfig, target: Any, stack: ExitStack, *, seed: int, steps: int,
                 chunk: int, fast: bool, render: RenderCheck) -> None:
        self.rows, self.cfg, self.target, self.stack, self.seed = rows, cfg, target, stack, seed
        self.steps, self.chunk, self.fast, self.render_check = steps, chunk, fast, render

    def run_all(self) -> None:
        raise NotImplementedError


class _SingleChecks(_Checks):
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
        venv = self.stack.enter_context(_closing(_build(self.cfg, self.target, 1)))
        self.env = venv.envs[0]
        if isinstance(self.env, GymnasiumEnv):  # to see whether the env's own info reports success
            self.spy = self.env.env = _InfoSpy(self.env.env)
        _reset(self.env, self.seed)
        how = "through the gymnasium adapter" if adapted_target(self.target) is not None else "as it is"
        return f"{describe_target(self.target)}, built {how}"

    def spaces(self) -> str:
        return _spaces(self.env.observation_space, self.env.action_space)

    def step_types(self) -> None:
        _reset(self.env, self.seed)
        out = self.env.step(self.env.action_space.sample())
        if not (isinstance(out, tuple) and len(out) == 5):
            raise CheckFailed(f"step() returned {_kind(out)}",
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
            obs, info = _reset(env, self.seed)
            if self.spy is not None:
                self.spy.infos.clear()
            rng = np.random.default_rng(self.seed)
            trace = _Trace([obs], [], [], None)
            for t in range(1, limit + 2):
                obs, reward, terminated, truncated, info = env.step(_random_action(env.action_space, rng))
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
            _check_single_obs(obs, space, "reset" if t == 0 else f"step {t}")
        for t, reward in enumerate(trace.rewards, 1):
            if not math.isfinite(float(reward)):
                raise CheckFailed(f"step {t}: reward is {reward}", "keep rewards finite")
        for key in IMAGE_KEYS:
            if key in trace.obs[0]:
                blank = _blank([o[key] for o in trace.obs])
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
        actions = [_random_action(env.action_space, rng) for _ in range(5)]
        first, again = _replay(env, self.seed, actions), _replay(env, self.seed, actions)
        fix = ("draw all randomness from self.np_random after super().reset(seed=seed) (not np.random or an "
               "unseeded generator), so that the same checkpoint gives the same eval numbers")
        diff = _difference(first[0], again[0])
        if diff:
            raise CheckFailed(f"reset(seed={self.seed}) twice gave different first observations ({diff})", fix,
                              warning=True)
        step = next((t for t, (a, b) in enumerate(zip(first, again)) if _difference(a, b)), None)
        if step is not None:
            raise CheckFailed(f"the same seed and actions gave different observations at step {step} "
                              f"({_difference(first[step], again[step])})", fix, warning=True)
        if not self.fast and not _difference(first[0], _replay(env, self.seed + 1, [])[0]):
            raise CheckFailed(f"reset with seeds {self.seed} and {self.seed + 1} gave the same first observation: "
                              "initial states do not depend on the seed", "randomize initial states with "
                              "self.np_random (ignore this if the task has one fixed start)", warning=True)
        return "same seed, same observations"

    def action_bounds(self) -> None:
        env = self.env
        if any(_nonfinite(obs) for obs in self.trace().obs):
            raise CheckFailed("not checked: observations are NaN/inf under in-bound random actions already",
                              "see the observations row", warning=True)
        _reset(env, self.seed)
        act = env.action_space
        for action in (act.low, act.high, (act.low + act.high) / 2, act.high * 2):
            obs, reward, *_ = env.step(action.astype(np.float32))
            bad = _nonfinite(obs)
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
        """``self.steps`` random actions (resetting at episode ends) without the simulator going unstable."""
        env, rng = self.env, np.random.default_rng(self.seed + 2)
        _reset(env, self.seed)
        for t in range(1, self.steps + 1):
            _, _, terminated, truncated, info = env.step(_random_action(env.action_space, rng))
            if sim_unstable(env, info):
                raise CheckFailed(
                    f"step {t} of random actions: the simulation went unstable (info['sim_unstable'], or MuJoCo's "
                    f"'Nan, Inf or huge value in QACC/QPOS/QVEL' warning); training would truncate such episodes",
                    "lower the model's timestep (<option timestep=...>), raise damping/armature, soften stiff "
                    "contacts or gains, or clip actions to what the actuators can follow")
            if terminated or truncated:
                _reset(env, None)
        return f"{self.steps} random steps"

    def render(self) -> str:
        try:
            venv = self.stack.enter_context(_closing(_build(self.cfg, self.target, 1, render_mode="rgb_array")))
        except CheckFailed as exc:
            raise self._no_frames(str(exc)) from None
        env = venv.envs[0]
        _reset(env, self.seed)
        rng = np.random.default_rng(self.seed)
        try:
            frames = [env.render()]
            for _ in range(3):
                env.step(_random_action(env.action_space, rng))
                frames.append(env.render())
        except NotImplementedError:  # gymnasium.Env's own render(): the class has none
            raise self._no_frames("the env does not implement render()") from None
        if any(f is None for f in frames):
            raise self._no_frames("render() returned None with render_mode='rgb_array'")
        return _check_frames(frames)

    def _no_frames(self, why: str) -> CheckFailed:
        fix = ("take render_mode=None in the constructor and, when it is 'rgb_array', return a uint8 [H, W, 3] frame "
               "from render()")
        return CheckFailed(f"eval videos (runner.eval_video, embodied eval --video) need frames: {why}", fix,
                           warning=self.render_check != "require")

    def task_description(self) -> str:
        _reset(self.env, self.seed)
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
            if _own_frames(exc):
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
    obs, _ = _reset(env, seed)
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
    with _closing(_build(cfg, target, 2)) as venv:
        venv.reset(seed=seed)
        for i in range(chunks):
            result = venv.chunk_step(_random_actions(venv.single_action_space, 2, chunk, rng))
            _check_result(result, 2, chunk, f"chunk {i}")
            episodes += len(result.episodes)
    return f"{chunks} chunks of {chunk}, {episodes} episodes ended"


# -- batched simulators ---------------------------------------------------------------------------


class _BatchedChecks(_Checks):
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
        self.venv = self.stack.enter_context(_closing(_build(self.cfg, self.target, self.num_envs, auto_reset=True)))
        self.first = self.venv.reset(seed=self.seed)
        if not isinstance(self.first, dict):
            raise CheckFailed(f"reset(seed) returned {_kind(self.first)}, not a dict of batched observations",
                              "return {'states': float32 [B, S], ..., 'task_descriptions': [B str]}", stop=True)
        return f"{describe_target(self.target)} (BatchedEnv), num_envs={self.num_envs}"

    def spaces(self) -> str:
        missing = [a for a in ("single_observation_space", "single_action_space") if not hasattr(self.venv, a)]
        if missing:
            raise CheckFailed(f"the BatchedEnv has no {' or '.join(missing)}", "set single_observation_space "
                              "(gymnasium.spaces.Dict of one env's observation) and single_action_space (1-D float32 "
                              "Box) in __init__, see embodied/envs/batched.py", stop=True)
        return _spaces(self.venv.single_observation_space, self.venv.single_action_space)

    def observations(self) -> str:
        _check_obs(self.first, self.num_envs, "reset", self.venv.single_observation_space)
        return ", ".join(f"{k} {np.asarray(v).dtype}{list(np.asarray(v).shape)}" for k, v in self.first.items()
                         if k != TASK_DESCRIPTIONS)

    def determinism(self) -> str:
        fix = (f"seed env i's generator with seed + i in reset(seed) (np.random.default_rng(seed + i)), never "
               f"from global state, so that the same checkpoint gives the same eval numbers")
        a, b = self.venv.reset(seed=self.seed), self.venv.reset(seed=self.seed)
        diff = _difference(_arrays(a), _arrays(b))
        if diff:
            raise CheckFailed(f"reset(seed={self.seed}) twice gave different observations ({diff})", fix, warning=True)
        if not self.fast and not _difference(_arrays(a), _arrays(self.venv.reset(seed=self.seed + 1))):
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
            result = venv.chunk_step(_random_actions(venv.single_action_space, self.num_envs, self.chunk, rng))
            _check_result(result, self.num_envs, self.chunk, f"chunk {i}")
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
        venv = self.stack.enter_context(_closing(_build(self.cfg, self.target, self.num_envs, auto_reset=False)))
        venv.reset(seed=self.seed)
        rng = np.random.default_rng(self.seed)
        fix = ("with auto_reset=False keep a done env done: executed, rewards, terminations, truncations and dones "
               "all False/0 for it in every later chunk, no episode record, until reset() (eval and GRPO rely on it)")
        done = np.zeros(self.num_envs, dtype=bool)
        for i in range(self._limit_chunks() + 2):
            result = venv.chunk_step(_random_actions(venv.single_action_space, self.num_envs, self.chunk, rng))
            _check_result(result, self.num_envs, self.chunk, f"chunk {i}")
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
            bad = _nonfinite(_arrays(result.obs))
            if bad or not np.isfinite(np.asarray(result.rewards)).all():
                raise CheckFailed(f"chunks of the action space's {name} bound gave {bad or 'NaN/inf rewards'}",
                                  "clip actions to the action space inside chunk_step()")

    def render(self) -> str:
        fix = ("take render_mode=None in the constructor (the framework passes 'rgb_array' when videos are on) and "
               "return one uint8 [H, W, 3] frame per env from render()")
        try:
            venv = self.stack.enter_context(_closing(_build(self.cfg, self.target, self.num_envs, auto_reset=False,
                                                            render_mode="rgb_array")))
        except CheckFailed as exc:
            raise CheckFailed(f"eval videos need frames: {exc}", fix, warning=self.render_check != "require") from None
        venv.reset(seed=self.seed)
        batches = [venv.render()]
        venv.chunk_step(_random_actions(venv.single_action_space, self.num_envs, self.chunk,
                                        np.random.default_rng(self.seed)))
        batches.append(venv.render())
        for frames in batches:
            if frames is None or len(frames) != self.num_envs:
                raise CheckFailed(f"render() returned {_kind(frames)}, expected a list of {self.num_envs} frames",
                                  fix, warning=frames is None and self.render_check != "require")
        return _check_frames([f for frames in batches for f in frames])

    def task_descriptions(self) -> str:
        tasks = self.first.get(TASK_DESCRIPTIONS)
        if not tasks or not all(tasks):
            raise CheckFailed("observations have no task_descriptions (or empty ones): per-task eval has no task names "
                              "and language policies (VLA) get an empty instruction",
                              "add 'task_descriptions': [one str per env] to every observation", warning=True)
        return repr(sorted(set(tasks)))


def _check_result(r: ChunkStepResult, num_envs: int, chunk: int, where: str) -> None:
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
    _check_obs(r.obs, num_envs, where)
    if np.asarray(r.dones).any():
        if r.final_obs is None:
            raise CheckFailed(f"{where}: an episode ended but final_obs is None",
                              "return final_obs (the terminal observation of each done env, the next one elsewhere): "
                              "it bootstraps the value on truncation and is the last video frame")
        _check_obs(r.final_obs, num_envs, f"{where} final_obs")
    if not np.isfinite(np.asarray(r.rewards)).all():
        raise CheckFailed(f"{where}: rewards contain NaN or inf", "keep rewards finite")


# -- observations, spaces and frames --------------------------------------------------------------


def _spaces(obs_space: gym.spaces.Space, act: gym.spaces.Space) -> str:
    if not isinstance(obs_space, gym.spaces.Dict):
        raise CheckFailed(f"observation_space is {obs_space}", f"use a gymnasium.spaces.Dict with keys among "
                          f"{list(KNOWN_KEYS)}")
    unknown = [k for k in obs_space.spaces if k not in KNOWN_KEYS]
    if unknown:
        raise CheckFailed(f"observation keys {unknown} are not embodied's{_did_you_mean(unknown)}",
                          f"use only {list(KNOWN_KEYS)} (states: float32 [S]; images: uint8 [H, W, 3])")
    if not (isinstance(act, gym.spaces.Box) and len(act.shape) == 1):
        raise CheckFailed(f"action_space is {act}", "embodied policies emit continuous actions: use a 1-D "
                          "gymnasium.spaces.Box of float32 (for a discrete choice, e.g. one score per choice and "
                          "argmax in step)")
    if act.dtype != np.float32 or not (np.isfinite(act.low).all() and np.isfinite(act.high).all()):
        raise CheckFailed(f"action space dtype {act.dtype}, bounds [{act.low}, {act.high}]",
                          "use float32 actions with finite bounds (policies and clipping rely on them)")
    return f"obs keys {list(obs_space.spaces)}, action {act.shape}"


def _check_single_obs(obs: Any, space: gym.spaces.Space, where: str) -> None:
    """One env's observation: a dict of embodied's keys, right dtypes, its space's shapes, finite."""
    if not isinstance(obs, dict):
        raise CheckFailed(f"{where}: the observation is {_kind(obs)}, not a dict",
                          f"return a dict with keys among {list(KNOWN_KEYS)}")
    _check_keys(obs, where)
    declared = space.spaces if isinstance(space, gym.spaces.Dict) else {}
    for key, value in obs.items():
        arr = np.asarray(value)
        _check_dtype(key, arr, 1 if key == STATES else 3, where)
        if key in declared and arr.shape != declared[key].shape:
            raise CheckFailed(f"{where}: {key} has shape {list(arr.shape)}, its space says {list(declared[key].shape)}",
                              "return observations of the shapes observation_space declares")
    missing = [k for k in declared if k not in obs]
    if missing:
        raise CheckFailed(f"{where}: observation lacks {missing} that observation_space declares",
                          "return every key of observation_space")
    bad = _nonfinite(obs)
    if bad:
        raise CheckFailed(f"{where}: {bad}", "keep observations finite (check divisions, and the simulator's "
                          "state after large actions)")


def _check_obs(obs: Obs, num_envs: int, where: str, space: gym.spaces.Space | None = None) -> None:
    """A batch of observations: embodied's keys, B rows each, right dtypes, finite; task_descriptions B strings."""
    if not isinstance(obs, dict):
        raise CheckFailed(f"{where}: observations are {_kind(obs)}, not a dict", "return a dict of batched arrays")
    tasks = obs.get(TASK_DESCRIPTIONS)
    if tasks is not None and not (isinstance(tasks, (list, tuple)) and len(tasks) == num_envs
                                  and all(isinstance(s, str) for s in tasks)):
        raise CheckFailed(f"{where}: {TASK_DESCRIPTIONS} is not a list of {num_envs} strings",
                          "give one str per env (the episode's instruction)")
    arrays = _arrays(obs)
    _check_keys(arrays, where)
    for key, arr in arrays.items():
        _check_dtype(key, arr, 2 if key == STATES else 4, where)
        if arr.shape[0] != num_envs:
            raise CheckFailed(f"{where}: {key} has {arr.shape[0]} rows for {num_envs} envs", "batch every env")
        if space is not None and key in space.spaces and arr.shape[1:] != space[key].shape:
            raise CheckFailed(f"{where}: {key} rows have shape {list(arr.shape[1:])}, single_observation_space says "
                              f"{list(space[key].shape)}", "return observations of the declared shapes")
    bad = _nonfinite(arrays)
    if bad:
        raise CheckFailed(f"{where}: {bad}", "keep observations finite")


def _check_keys(obs: dict, where: str) -> None:
    unknown = [k for k in obs if k not in KNOWN_KEYS]
    if unknown:
        raise CheckFailed(f"{where}: observation keys {unknown} are not embodied's{_did_you_mean(unknown)}",
                          f"use only {list(KNOWN_KEYS)} (and {TASK_DESCRIPTIONS} for a batched env)")


def _check_dtype(key: str, arr: np.ndarray, ndim: int, where: str) -> None:
    if key == STATES and (arr.dtype != np.float32 or arr.ndim != ndim):
        raise CheckFailed(f"{where}: states is {arr.dtype}{list(arr.shape)}",
                          "return states as float32 (obs.astype(np.float32)), one flat vector per env, and declare "
                          "the space with dtype=np.float32")
    if key in IMAGE_KEYS and (arr.dtype != np.uint8 or arr.ndim != ndim or arr.shape[-1] != 3):
        raise CheckFailed(f"{where}: {key} is {arr.dtype}{list(arr.shape)}", f"{key} must be uint8 [H, W, 3] per env")


def _did_you_mean(keys: list[str]) -> str:
    close = {k: difflib.get_close_matches(k, [*KNOWN_KEYS, TASK_DESCRIPTIONS], n=1, cutoff=0.6) for k in keys}
    hints = [f"{k!r} -> {m[0]!r}" for k, m in close.items() if m]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def _nonfinite(obs: Any) -> str:
    """'states[2] is nan' for the first NaN/inf entry of a dict of arrays (or an array), else ''."""
    items = obs.items() if isinstance(obs, dict) else [("observation", obs)]
    for key, value in items:
        arr = np.asarray(value)
        if key == TASK_DESCRIPTIONS or not np.issubdtype(arr.dtype, np.number):
            continue
        bad = np.argwhere(~np.isfinite(arr))
        if len(bad):
            index = ", ".join(map(str, bad[0].tolist()))
            more = f" ({len(bad)} entries NaN/inf)" if len(bad) > 1 else ""
            return f"{key}[{index}] is {arr[tuple(bad[0])]}{more}"
    return ""


def _check_frames(frames: list) -> str:
    for frame in frames:
        arr = np.asarray(frame)
        if not isinstance(frame, np.ndarray) or arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[-1] != 3:
            raise CheckFailed(f"render() returned {_kind(frame)}", "return a uint8 [H, W, 3] RGB frame "
                              "(np.asarray(frame, dtype=np.uint8))")
    blank = _blank(frames)
    if blank:
        raise CheckFailed(f"render() frames {blank}", "check lights and camera pose; with MuJoCo set MUJOCO_GL=egl")
    return f"{len(frames)} frames {list(np.asarray(frames[0]).shape)}"


def _blank(frames: list) -> str:
    """Why a sequence of frames shows nothing ('' if it shows something): all black, or one flat colour."""
    arrs = [np.asarray(f) for f in frames]
    if all(a.max() <= 5 for a in arrs):
        return "are black"
    if all(np.array_equal(a, arrs[0]) for a in arrs) and arrs[0].min() == arrs[0].max():
        return f"are one flat colour {arrs[0].reshape(-1, arrs[0].shape[-1])[0].tolist()}"
    return ""


def _arrays(obs: Obs) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in obs.items() if k != TASK_DESCRIPTIONS}


def _difference(a: Any, b: Any) -> str:
    """Where two observations (dicts of arrays) first differ, e.g. 'states[1]: 0.0 vs 1.0'; '' if equal (NaN == NaN)."""
    a, b = (x if isinstance(x, dict) else {"observation": x} for x in (a, b))
    if sorted(a) != sorted(b):
        return f"keys {sorted(a)} vs {sorted(b)}"
    for key in sorted(a):
        x, y = np.asarray(a[key]), np.asarray(b[key])
        if x.shape != y.shape:
            return f"{key} shapes {list(x.shape)} vs {list(y.shape)}"
        same = (x == y) | (np.isnan(x) & np.isnan(y)) if np.issubdtype(x.dtype, np.floating) else (x == y)
        if not np.all(same):
            index = tuple(int(i) for i in np.argwhere(~np.asarray(same))[0]) if np.ndim(same) else ()
            return f"{key}{list(index) if index else ''}: {x[index]} vs {y[index]}"
    return ""


def _random_action(space: gym.spaces.Box, rng: np.random.Generator) -> np.ndarray:
    low = np.where(np.isfinite(space.low), space.low, -1.0)
    high = np.where(np.isfinite(space.high), space.high, 1.0)
    return rng.uniform(low, high).astype(np.float32)


def _random_actions(space: gym.spaces.Box, num_envs: int, chunk: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([[_random_action(space, rng) for _ in range(chunk)] for _ in range(num_envs)])


def _kind(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} items"
    if isinstance(value, np.ndarray):
        return f"an array {value.dtype}{list(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


class _closing:
    """``contextlib.closing`` that tolerates envs without ``close``."""

    def __init__(self, thing: Any) -> None:
        self.thing = thing

    def __enter__(self) -> Any:
        return self.thing

    def __exit__(self, *exc: object) -> None:
        close = getattr(self.thing, "close", None)
        if callable(close):
            close()


# -- naming the user's code: its class, file and traceback ------------------------------------------

_ROOT = Path(embodied.__file__).resolve().parents[1]
_FRAMEWORK = [Path(embodied.__file__).resolve().parent, _ROOT / "envs" / "chunked.py", _ROOT / "envs" / "batched.py",
              _ROOT / "envs" / "adapters", Path(gym.__file__).resolve().parent]
_LIBRARY = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}


def describe_target(target: Any) -> str:
    """The user's class (or gymnasium id) behind an env entry point, with its file: ``pkg.mod.Class (pkg/mod.py)``."""
    inner = adapted_target(target)
    if isinstance(inner, str):
        return f"gymnasium id {inner!r}"
    obj = inner if inner is not None else target
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    return f"{name} ({_short(path)})" if path else name


def _signature(target: Any) -> str:
    inner = adapted_target(target)
    obj = inner if isinstance(inner, type) else target
    for eval_str in (True, False):  # annotations as written when they cannot be evaluated
        try:
            signature = inspect.signature(obj, eval_str=eval_str).replace(return_annotation=inspect.Signature.empty)
            return f"{getattr(obj, '__qualname__', obj)}{signature}"
        except Exception:  # noqa: BLE001, S112
            continue
    return describe_target(target)


def _short(path: str | None) -> str:
    if not path:
        return "?"
    try:
        short = os.path.relpath(path)
    except ValueError:
        return path
    return path if short.startswith("..") else short


def _unwrap(exc: BaseException) -> BaseException:
    """The env's own exception behind an ``EnvError`` (the vector env's wrapper)."""
    while isinstance(exc, EnvError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _in(path: str, roots: list[Path]) -> bool:
    p = Path(path).resolve()
    return any(p == r or r in p.parents for r in roots)


def _own_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """Frames of the user's code: neither the framework, gymnasium, the standard library nor site-packages."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")
            and not _in(f.filename, _FRAMEWORK) and not _in(f.filename, [Path(p) for p in _LIBRARY])]


def _traceback_text(exc: BaseException) -> str:
    """The traceback from the first frame of the user's own code on (all of it if there is none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = _own_frames(exc)
    shown = frames[frames.index(own[0]):] if own else frames
    title = "the env's own code" if own else "no frame of the env's own code"
    return (f"Traceback ({title}, most recent call last):\n"
            + "".join(traceback.format_list(shown) + traceback.format_exception_only(type(exc), exc))).rstrip()


def _crash_row(name: str, exc: BaseException, cfg: EnvConfig, target: Any) -> CheckResult:
    cause = _unwrap(exc)
    own = _own_frames(cause)
    where = f" in {own[-1].name}() at {_short(own[-1].filename)}:{own[-1].lineno}" if own else ""
    if isinstance(cause, SyntaxError):  # the user's file and line are in the exception, not in a frame
        where = f" at {_short(cause.filename)}:{cause.lineno}"
    detail = f"{type(cause).__name__}: {cause}{where}"
    fix = ("a crash in the env's own code: see the traceback above" if where else
           "the framework failed on what the env returned: see the traceback above and the rows before this one")
    hints = _kwarg_hints(cfg, target)
    if hints:
        fix += f"; note {'; '.join(hints)}"
    return CheckResult(name, False, detail, fix, "error", _traceback_text(cause))


def _kwarg_hints(cfg: EnvConfig, target: Any) -> list[str]:
    """env.kwargs whose type differs from the constructor parameter's default (untyped parameters)."""
    inner = adapted_target(target)
    obj = inner if isinstance(inner, type) else target
    try:
        params = inspect.signature(obj).parameters if obj is not None else {}
    except (TypeError, ValueError):
        return []
    hints = []
    for key, value in cfg.kwargs.items():
        default = params[key].default if key in params else None
        if default is None or default is inspect.Parameter.empty or type(default) not in (int, float, bool, str):
            continue
        ok = isinstance(value, type(default)) and not (isinstance(value, bool) and type(default) is not bool)
        ok = ok or (type(default) is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            hints.append(f"env.kwargs.{key}={value!r} is a {type(value).__name__}, but its default is the "
                         f"{type(default).__name__} {default!r}")
    return hints


# -- table, JSON and the command --------------------------------------------------------------------


def _plain(text: str) -> str:
    """A warning without terminal colour codes and gymnasium's 'WARN:' prefix."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace("WARN: ", "").strip()


def format_table(env_id: str, results: list[CheckResult]) -> str:
    width = max(len(r.name) for r in results)
    label = {"ok": "PASS", "warning": "WARN", "error": "FAIL"}
    lines = [f"check-env {env_id}"]
    for r in results:
        lines.append(f"  {label[r.severity]}  {r.name:<{width}}  {r.detail}".rstrip())
        if r.severity != "ok":
            lines.append(f"        {'':<{width}}  fix: {r.fix}")
    failed = sum(r.severity == "error" for r in results)
    warned = sum(r.severity == "warning" for r in results)
    lines.append(f"{len(results) - failed} passed ({warned} with warnings), {failed} failed")
    return "\n".join(lines)


def print_table(env_id: str, results: list[CheckResult]) -> None:
    for r in results:
        if r.traceback:
            print(r.traceback)
    print(format_table(env_id, results))


def build_parser(prog: str = "embodied check-env") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].split(": ", 1)[1],
                                     epilog="Exit status: 0 if no check fails (warnings allowed), 1 otherwise.")
    parser.add_argument("id", help="registered env id, gymnasium id, or package.module:Class")
    parser.add_argument("--steps", type=int, default=100, help="sub-steps of random actions for the chunk rules")
    parser.add_argument("--chunk", type=int, default=4, help="action chunk length used for the chunk rules")
    parser.add_argument("--obs-mode", default="state", choices=["state", "rgb", "state+rgb"])
    parser.add_argument("--max-episode-steps", type=int, default=50)
    parser.add_argument("--kwargs", default="{}", help="JSON object of extra constructor arguments (env.kwargs)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the checks")
    parser.add_argument("--fast", action="store_true",
                        help="only the preflight's fast subset (for simulators that take seconds to build or step)")
    parser.add_argument("--json", action="store_true",
                        help="print the rows as a JSON list of {name, passed, detail, fix, severity} (tracebacks "
                             "go to stderr)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as exc:
        parser.error(f"--kwargs is not JSON: {exc}")
    if not isinstance(kwargs, dict):
        parser.error(f"--kwargs must be a JSON object, got {args.kwargs}")
    cfg = EnvConfig(id=args.id, num_envs=2, obs_mode=args.obs_mode, max_episode_steps=args.max_episode_steps,
                    kwargs=kwargs)
    results = check_env(cfg, steps=args.steps, chunk=args.chunk, seed=args.seed, fast=args.fast)
    if args.json:
        for r in results:
            if r.traceback:
                print(r.traceback, file=sys.stderr)
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        print_table(args.id, results)
    return 1 if any(r.severity == "error" for r in results) else 0

"""``embodied check-env ID``: validate a simulator against the contracts before training on it.

    embodied check-env Reach-v0 --steps 200
    embodied check-env my_pkg.my_env:MyEnv --obs-mode rgb --kwargs '{"difficulty": 2}'

Each check prints PASS or FAIL, and for a failure what is wrong and how to fix it; the command
exits non-zero if any check fails. Per-env gymnasium envs get gymnasium's own ``check_env``,
the observation/space/step-type checks and the chunk-step rules through ``ChunkedVectorEnv``;
a ``BatchedEnv`` gets the observation checks and the chunk-step rules.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import warnings
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from embodied.config import EnvConfig
from embodied.env_factory import make_vector_env
from embodied.registry import ENVS, UnknownNameError
from embodied.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, ChunkStepResult, Obs
from embodied.envs.batched import is_batched

IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)
KNOWN_KEYS = (STATES, *IMAGE_KEYS)


class CheckFailed(Exception):
    """A failed check: ``str(self)`` says what is wrong, ``fix`` how to mend it."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.fix = fix


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    fix: str = ""


def check_env(cfg: EnvConfig, steps: int = 100, chunk: int = 4, seed: int = 0) -> list[CheckResult]:
    """Run every check that applies to ``cfg.id``; a check that cannot run is reported failed."""
    results: list[CheckResult] = []

    def run(name: str, fn: Callable[[], str | None]) -> bool:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                detail = fn() or ""
            # Gymnasium raises on contract breaks and warns on recommendations: show those, pass.
            notes = sorted({_plain(str(w.message)) for w in caught if issubclass(w.category, UserWarning)})
            results.append(CheckResult(name, True, "; ".join(filter(None, [detail, *notes]))))
            return True
        except CheckFailed as exc:
            results.append(CheckResult(name, False, str(exc), exc.fix))
        except UnknownNameError as exc:
            results.append(CheckResult(name, False, str(exc), "register the env or name it as package.module:attr"))
        except Exception as exc:  # noqa: BLE001 - any crash is a finding to report, not to raise
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}",
                                       "the env raised on valid input; see the error above"))
        return False

    target_box: list = []
    if not run("resolve id", lambda: _resolve(cfg, target_box)):
        return results
    target = target_box[0]
    if not is_batched(target):
        single = lambda **kw: target(obs_mode=cfg.obs_mode, max_episode_steps=cfg.max_episode_steps,  # noqa: E731
                                     **cfg.kwargs, **kw)
        run("gymnasium check_env", lambda: _gym_check(single))
        run("spaces", lambda: _spaces(single))
        run("step types and info['success']", lambda: _step_types(single, seed))
        run("reset-seed determinism", lambda: _determinism(single, seed))
        run("action bounds", lambda: _action_bounds(single, seed))
        run("episode ends within max_episode_steps", lambda: _time_limit(single, cfg.max_episode_steps, seed))
        if cfg.obs_mode != "state":
            run("rendered frames not black", lambda: _frames(single, seed))
    run("observations: keys, dtypes, shapes, finite", lambda: _vector_obs(cfg, seed))
    run("chunk-step rules", lambda: _chunk_rules(cfg, steps, chunk, seed))
    return results


# -- single-env checks ----------------------------------------------------------------------------


def _resolve(cfg: EnvConfig, box: list) -> str:
    box.append(ENVS.resolve(cfg.id))
    kind = "BatchedEnv" if is_batched(box[0]) else "gymnasium env"
    return f"{getattr(box[0], '__qualname__', box[0])} ({kind})"


def _gym_check(make: Callable[..., gym.Env]) -> None:
    from gymnasium.utils.env_checker import check_env as gym_check_env

    with closing(make()) as env:
        gym_check_env(env.unwrapped, skip_render_check=True)


def _spaces(make: Callable[..., gym.Env]) -> str:
    with closing(make()) as env:
        obs_space, act = env.observation_space, env.action_space
        if not isinstance(obs_space, gym.spaces.Dict):
            raise CheckFailed(f"observation_space is {type(obs_space).__name__}",
                              f"return a dict observation with keys among {KNOWN_KEYS} (spaces.Dict)")
        unknown = [k for k in obs_space.spaces if k not in KNOWN_KEYS]
        if unknown:
            raise CheckFailed(f"unknown observation keys {unknown}", f"use only {KNOWN_KEYS}")
        if not (isinstance(act, gym.spaces.Box) and len(act.shape) == 1):
            raise CheckFailed(f"action_space is {act}", "use a 1-D gymnasium.spaces.Box of float32 actions")
        if act.dtype != np.float32 or not (np.isfinite(act.low).all() and np.isfinite(act.high).all()):
            raise CheckFailed(f"action space dtype {act.dtype}, bounds [{act.low}, {act.high}]",
                              "use float32 actions with finite bounds (policies and clipping rely on them)")
        return f"obs keys {list(obs_space.spaces)}, action {act.shape}"


def _step_types(make: Callable[..., gym.Env], seed: int) -> None:
    with closing(make()) as env:
        _, info = env.reset(seed=seed)
        out = env.step(env.action_space.sample())
        if not (isinstance(out, tuple) and len(out) == 5):
            raise CheckFailed(f"step returned {type(out).__name__} of length {len(out) if isinstance(out, tuple) else '?'}",
                              "return (obs, reward, terminated, truncated, info) as gymnasium >= 0.26")
        _, reward, terminated, truncated, info = out
        problems = []
        if not isinstance(reward, (int, float, np.floating, np.integer)) or isinstance(reward, bool):
            problems.append(f"reward is {type(reward).__name__}, expected a float")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                problems.append(f"{name} is {type(flag).__name__}, expected bool")
        if not isinstance(info, dict):
            problems.append(f"info is {type(info).__name__}, expected dict")
        elif "success" not in info:
            problems.append("info has no 'success' key")
        if problems:
            raise CheckFailed("; ".join(problems), "return float reward, bool flags and info={'success': bool, ...}")


def _rollout(env: gym.Env, seed: int, steps: int) -> list:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    trace = [obs]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        trace += [obs, reward]
        if terminated or truncated:
            break
    return trace


def _determinism(make: Callable[..., gym.Env], seed: int) -> None:
    with closing(make()) as env:
        first, again, other = _rollout(env, seed, 10), _rollout(env, seed, 10), _rollout(env, seed + 1, 10)
    if not _same(first, again):
        raise CheckFailed("reset(seed=s) and the same actions gave different observations or rewards",
                          "draw all randomness from self.np_random after super().reset(seed=seed)")
    if _same(first[:1], other[:1]):
        raise CheckFailed("reset with different seeds gave identical first observations",
                          "randomize initial states with self.np_random (or ignore if the task is fixed)")


def _action_bounds(make: Callable[..., gym.Env], seed: int) -> None:
    with closing(make()) as env:
        env.reset(seed=seed)
        act = env.action_space
        for action in (act.low, act.high, (act.low + act.high) / 2, act.high * 2):
            obs, reward, *_ = env.step(action.astype(np.float32))
            if not _finite(obs) or not math.isfinite(float(reward)):
                raise CheckFailed(f"action {action} gave NaN/inf observations or reward",
                                  "clip actions to the action space inside step()")


def _time_limit(make: Callable[..., gym.Env], max_steps: int, seed: int) -> str:
    with closing(make()) as env:
        env.reset(seed=seed)
        for t in range(1, max_steps + 1):
            *_, terminated, truncated, _ = env.step(np.zeros(env.action_space.shape, dtype=np.float32))
            if terminated or truncated:
                return f"ended after {t} steps"
        raise CheckFailed(f"no termination or truncation after max_episode_steps={max_steps}",
                          "set truncated=True once max_episode_steps steps have run")


def _frames(make: Callable[..., gym.Env], seed: int) -> str:
    with closing(make()) as env:
        obs, _ = env.reset(seed=seed)
        shown = []
        for key in IMAGE_KEYS:
            if key in obs:
                frame = np.asarray(obs[key])
                if frame.mean() < 5 or frame.std() < 2:
                    raise CheckFailed(f"{key} is black or blank (mean {frame.mean():.1f}, std {frame.std():.1f})",
                                      "check lights and camera pose; with MuJoCo set MUJOCO_GL=egl")
                shown.append(f"{key} {frame.shape}")
        return ", ".join(shown)


# -- batched checks -------------------------------------------------------------------------------


def _vector_obs(cfg: EnvConfig, seed: int) -> str:
    with closing(make_vector_env(cfg, 2, name=cfg.id)) as venv:
        obs = venv.reset(seed=seed)
        _check_obs(obs, 2, where="reset")
        return ", ".join(f"{k} {np.asarray(v).dtype}{list(np.asarray(v).shape)}" for k, v in obs.items()
                         if k != TASK_DESCRIPTIONS)


def _check_obs(obs: Obs, num_envs: int, where: str) -> None:
    for key, value in obs.items():
        if key == TASK_DESCRIPTIONS:
            if not (isinstance(value, list) and len(value) == num_envs and all(isinstance(s, str) for s in value)):
                raise CheckFailed(f"{where}: {key} is not a list of {num_envs} strings",
                                  "expose a str `task_description` attribute on the env")
            continue
        if key not in KNOWN_KEYS:
            raise CheckFailed(f"{where}: unknown observation key {key!r}", f"use only {KNOWN_KEYS}")
        arr = np.asarray(value)
        if key == STATES and (arr.dtype != np.float32 or arr.ndim != 2):
            raise CheckFailed(f"{where}: states is {arr.dtype}{list(arr.shape)}", "states must be float32 [S] per env")
        if key in IMAGE_KEYS and (arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3):
            raise CheckFailed(f"{where}: {key} is {arr.dtype}{list(arr.shape)}", f"{key} must be uint8 [H, W, 3]")
        if arr.shape[0] != num_envs:
            raise CheckFailed(f"{where}: {key} has {arr.shape[0]} rows for {num_envs} envs", "batch every env")
        if not np.isfinite(arr).all():
            raise CheckFailed(f"{where}: {key} contains NaN or inf", "keep observations finite")


def _chunk_rules(cfg: EnvConfig, steps: int, chunk: int, seed: int) -> str:
    """Random chunks through the vector env, checking every rule of the chunk-step contract."""
    rng = np.random.default_rng(seed)
    episodes = 0
    with closing(make_vector_env(cfg, 2, name=cfg.id)) as venv:
        act = venv.single_action_space
        venv.reset(seed=seed)
        for i in range(max(1, steps // chunk)):
            actions = rng.uniform(act.low, act.high, (2, chunk, act.shape[0])).astype(np.float32)
            result = venv.chunk_step(actions)
            _check_result(result, 2, chunk, f"chunk {i}")
            episodes += len(result.episodes)
    return f"{max(1, steps // chunk)} chunks of {chunk}, {episodes} episodes ended"


def _check_result(r: ChunkStepResult, num_envs: int, chunk: int, where: str) -> None:
    fix = "follow envs/chunked.py's contract (or wrap per-env gymnasium envs in ChunkedVectorEnv)"
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
    if r.dones.any() and r.final_obs is None:
        raise CheckFailed(f"{where}: an episode ended but final_obs is None", fix)
    if len(r.episodes) != int(np.asarray(r.dones).sum()):
        raise CheckFailed(f"{where}: {len(r.episodes)} episode records for {int(r.dones.sum())} dones", fix)
    _check_obs(r.obs, num_envs, where)
    if not np.isfinite(np.asarray(r.rewards)).all():
        raise CheckFailed(f"{where}: rewards contain NaN or inf", "keep rewards finite")


# -- helpers and CLI ------------------------------------------------------------------------------


def _plain(text: str) -> str:
    """A warning without terminal colour codes and gymnasium's 'WARN:' prefix."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace("WARN: ", "").strip()


def _finite(obs: object) -> bool:
    values = obs.values() if isinstance(obs, dict) else [obs]
    return all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in values)


def _same(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        xs = [x[k] for k in sorted(x)] if isinstance(x, dict) else [x]
        ys = [y[k] for k in sorted(y)] if isinstance(y, dict) else [y]
        if any(not np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(xs, ys)):
            return False
    return True


def print_table(env_id: str, results: list[CheckResult]) -> None:
    width = max(len(r.name) for r in results)
    print(f"check-env {env_id}")
    for r in results:
        print(f"  {'PASS' if r.passed else 'FAIL'}  {r.name:<{width}}  {r.detail}")
        if not r.passed:
            print(f"        {'':<{width}}  fix: {r.fix}")
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied check-env", description=__doc__.splitlines()[0])
    parser.add_argument("id", help="registered env id or package.module:attr")
    parser.add_argument("--steps", type=int, default=100, help="sub-steps of random actions for the chunk rules")
    parser.add_argument("--chunk", type=int, default=4, help="action chunk length used for the chunk rules")
    parser.add_argument("--obs-mode", default="state", choices=["state", "rgb", "state+rgb"])
    parser.add_argument("--max-episode-steps", type=int, default=50)
    parser.add_argument("--kwargs", default="{}", help="JSON object of extra constructor arguments")
    args = parser.parse_args(argv)
    cfg = EnvConfig(id=args.id, num_envs=2, obs_mode=args.obs_mode, max_episode_steps=args.max_episode_steps,
                    kwargs=json.loads(args.kwargs))
    results = check_env(cfg, steps=args.steps, chunk=args.chunk)
    print_table(args.id, results)
    return 0 if all(r.passed for r in results) else 1

"""Observation, space and frame checks: embodied's keys, dtypes, shapes, finite numbers, frames that show something."""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
import numpy as np

from embodied.core.types import MAIN_IMAGES, STATES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs
from embodied.env_runtime.check_env.diagnosis import CheckFailed

IMAGE_KEYS = (MAIN_IMAGES, WRIST_IMAGES)
KNOWN_KEYS = (STATES, *IMAGE_KEYS)


def check_spaces(obs_space: gym.spaces.Space, act: gym.spaces.Space) -> str:
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


def check_single_obs(obs: Any, space: gym.spaces.Space, where: str) -> None:
    """One env's observation: a dict of embodied's keys, right dtypes, its space's shapes, finite."""
    if not isinstance(obs, dict):
        raise CheckFailed(f"{where}: the observation is {kind_of(obs)}, not a dict",
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
    bad = nonfinite(obs)
    if bad:
        raise CheckFailed(f"{where}: {bad}", "keep observations finite (check divisions, and the simulator's "
                          "state after large actions)")


def check_obs(obs: Obs, num_envs: int, where: str, space: gym.spaces.Space | None = None) -> None:
    """A batch of observations: embodied's keys, B rows each, right dtypes, finite; task_descriptions B strings."""
    if not isinstance(obs, dict):
        raise CheckFailed(f"{where}: observations are {kind_of(obs)}, not a dict", "return a dict of batched arrays")
    tasks = obs.get(TASK_DESCRIPTIONS)
    if tasks is not None and not (isinstance(tasks, (list, tuple)) and len(tasks) == num_envs
                                  and all(isinstance(s, str) for s in tasks)):
        raise CheckFailed(f"{where}: {TASK_DESCRIPTIONS} is not a list of {num_envs} strings",
                          "give one str per env (the episode's instruction)")
    arrays = obs_arrays(obs)
    _check_keys(arrays, where)
    for key, arr in arrays.items():
        _check_dtype(key, arr, 2 if key == STATES else 4, where)
        if arr.shape[0] != num_envs:
            raise CheckFailed(f"{where}: {key} has {arr.shape[0]} rows for {num_envs} envs", "batch every env")
        if space is not None and key in space.spaces and arr.shape[1:] != space[key].shape:
            raise CheckFailed(f"{where}: {key} rows have shape {list(arr.shape[1:])}, single_observation_space says "
                              f"{list(space[key].shape)}", "return observations of the declared shapes")
    bad = nonfinite(arrays)
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


def nonfinite(obs: Any) -> str:
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


def check_frames(frames: list) -> str:
    for frame in frames:
        arr = np.asarray(frame)
        if not isinstance(frame, np.ndarray) or arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[-1] != 3:
            raise CheckFailed(f"render() returned {kind_of(frame)}", "return a uint8 [H, W, 3] RGB frame "
                              "(np.asarray(frame, dtype=np.uint8))")
    blank = blank_frames(frames)
    if blank:
        raise CheckFailed(f"render() frames {blank}", "check lights and camera pose; with MuJoCo set MUJOCO_GL=egl")
    return f"{len(frames)} frames {list(np.asarray(frames[0]).shape)}"


def blank_frames(frames: list) -> str:
    """Why a sequence of frames shows nothing ('' if it shows something): all black, or one flat colour."""
    arrs = [np.asarray(f) for f in frames]
    if all(a.max() <= 5 for a in arrs):
        return "are black"
    if all(np.array_equal(a, arrs[0]) for a in arrs) and arrs[0].min() == arrs[0].max():
        return f"are one flat colour {arrs[0].reshape(-1, arrs[0].shape[-1])[0].tolist()}"
    return ""


def obs_arrays(obs: Obs) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in obs.items() if k != TASK_DESCRIPTIONS}


def difference(a: Any, b: Any) -> str:
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


def random_action(space: gym.spaces.Box, rng: np.random.Generator) -> np.ndarray:
    low = np.where(np.isfinite(space.low), space.low, -1.0)
    high = np.where(np.isfinite(space.high), space.high, 1.0)
    return rng.uniform(low, high).astype(np.float32)


def random_actions(space: gym.spaces.Box, num_envs: int, chunk: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([[random_action(space, rng) for _ in range(chunk)] for _ in range(num_envs)])


def kind_of(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} items"
    if isinstance(value, np.ndarray):
        return f"an array {value.dtype}{list(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]

"""Preflight: check-env's fast checks on one env, in the driver, before any worker starts.

``embodied train`` and ``embodied eval`` build one env (a batched env with ``num_envs=2``) of each
env section they use and run ``embodied.env_runtime.check_env``'s fast subset: reset/step types and the
5-tuple, observation keys/dtypes/shapes/finite, spaces, action bounds, an episode ending within
``max_episode_steps``, seed determinism, ``info['success']``, 20 random steps without the simulation
going unstable, ``render()`` when videos are on, and for a ``BatchedEnv`` the chunk-step rules,
``final_obs`` and ``auto_reset=False``. A failure is a
``ConfigError`` naming the user's class, its file and the fix (the CLI exits 2, and no run
directory is made); what only degrades results (no success key, a reset that ignores its seed) is
a warning. ``env.preflight: false`` skips it.

    preflight(cfg.env, "env", video=False)
"""

from __future__ import annotations

import json
import warnings
from typing import Literal

from embodied.config import Config, ConfigError, EnvConfig
from embodied.core.registry import ENVS
from embodied.env_runtime.check_env import CheckResult, check_env, describe_target
from embodied.env_runtime.factory import env_spec
from embodied.policy.config import PolicyConfig


def preflight(cfg: EnvConfig, section: str, video: bool,
              video_vectorization: Literal["native", "per_env"] = "native") -> None:
    """Raise ``ConfigError`` if ``cfg``'s env fails a fast check; warn once for each degrading finding.

    With ``video``, frames are checked on the path the eval envs record them through: the eval section's
    ``vectorization`` (``video_vectorization``), which for a built-in task picks its batched twin or not.
    A mixture has each member checked (one env of each).
    """
    if len(cfg.members()) > 1:
        for env_id in cfg.members():
            preflight(cfg.member(env_id), section, video, video_vectorization)
        return
    results = check_env(cfg, fast=True, render="require" if video else "skip", render_path=video_vectorization)
    who = _who(cfg, section)
    failed = [r for r in results if r.severity == "error"]
    if failed:
        raise ConfigError(_message(who, cfg, failed))
    for r in results:
        if r.severity == "warning":
            warnings.warn(f"{who}: {r.name}: {r.detail}; fix: {r.fix}", stacklevel=2)


def preflight_run(cfg: Config, video: bool) -> None:
    """``embodied train``'s preflight: the training env, and the eval env where it is another env (or renders)."""
    eval_env = cfg.resolved_eval_env()
    same = _same_env(cfg.env, eval_env)
    preflight(cfg.env, "env", video and same, eval_env.vectorization)
    if not same:
        preflight(eval_env, "eval_env", video, eval_env.vectorization)


def check_policy_fits(cfg: Config, env: EnvConfig, section: str) -> None:
    """Raise ``ConfigError`` if ``cfg.policy`` cannot take ``env``'s spaces (``PolicyConfig.spec_problems``):
    one env is built here for the policy types that check, none for the others."""
    if type(cfg.policy).spec_problems is PolicyConfig.spec_problems:
        return
    problems = cfg.policy.spec_problems(env_spec(env))
    if problems:
        raise ConfigError(f"policy.type={cfg.policy.type} does not fit {section}.id {env.id!r} "
                          f"(checked before any worker starts):\n  " + "\n  ".join(problems))


def _same_env(a: EnvConfig, b: EnvConfig) -> bool:
    """Whether two sections build the same env (num_envs and auto_reset aside: the checks cover both)."""
    fields = ("id", "obs_mode", "max_episode_steps", "kwargs")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _who(cfg: EnvConfig, section: str) -> str:
    try:
        return f"{section}.id {cfg.id!r} ({describe_target(ENVS.resolve(cfg.id))})"
    except Exception:  # noqa: BLE001 - the failing row says why it does not resolve
        return f"{section}.id {cfg.id!r}"


def _message(who: str, cfg: EnvConfig, failed: list[CheckResult]) -> str:
    lines = [f"{who} fails the preflight (check-env's fast checks, run before any worker starts):"]
    lines += ["  " + line for r in failed for line in r.traceback.splitlines()]  # above the rows that refer to it
    for r in failed:
        lines += [f"  {r.name}: {r.detail}", f"    fix: {r.fix}"]
    options = [f"--obs-mode {cfg.obs_mode}"]
    if cfg.max_episode_steps is not None:  # else check-env takes the env's own cap, as the run does
        options.append(f"--max-episode-steps {cfg.max_episode_steps}")
    if cfg.kwargs:
        options.append(f"--kwargs '{json.dumps(cfg.kwargs, default=str)}'")
    lines.append(f"All checks: embodied check-env {cfg.id} {' '.join(options)}; to skip this preflight: "
                 f"env.preflight=false")
    return "\n".join(lines)


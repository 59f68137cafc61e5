"""``embodied eval CONFIG --checkpoint RUN --suites ID,ID,...``: one checkpoint over several suites.

    report = evaluate_suites(cfg, checkpoint, "libero-pro-object", episodes=None, out_dir=Path("runs/x/eval/pro"))
    print(report["table"])

Each suite is the config's eval env with its id replaced (and its own episode cap where its class declares one);
each runs as ``embodied eval`` runs one env (its ``eval.json`` and videos under ``out_dir/<suite>/``), and
``out_dir/eval.json`` gathers the table's rows, every episode with its (suite, axis, task, init state), and each
suite's provenance; ``out_dir/suites.png`` draws the rows. Before any env is built, the checkpoint's observation
shapes are checked against every suite whose class can tell them without building (``observation_shapes``).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from embodied.backends import ClusterLostError, make_backend, user_packages
from embodied.checkpoint.store import CheckpointError, load_checkpoint
from embodied.config import Config, EnvConfig
from embodied.core.registry import ENVS
from embodied.core.types import MAIN_IMAGES, STATES, WRIST_IMAGES
from embodied.evaluation.run import checkpoint_name, evaluate_checkpoint
from embodied.evaluation.stats import write_json
from embodied.evaluation.suites import (episode_records, expand_suites, format_suite_table, plot_suites, suite_axis,
                                       suite_config, suite_rows)


def shape_problems(saved_spec: dict[str, Any], env: EnvConfig) -> list[str]:
    """Observation keys whose shape differs between a checkpoint's ``policy_spec`` and ``env`` (from its class's
    ``observation_shapes(obs_mode, **kwargs)``, without building it); [] when either cannot tell."""
    shapes_of = getattr(ENVS.resolve(env.id), "observation_shapes", None)
    if not callable(shapes_of) or not saved_spec:
        return []
    shapes = shapes_of(obs_mode=env.obs_mode, **env.kwargs)
    saved = {STATES: (saved_spec["state_dim"],) if saved_spec.get("state_dim") else None,
             MAIN_IMAGES: saved_spec.get("image_shape"), WRIST_IMAGES: saved_spec.get("wrist_image_shape")}
    problems = []
    for key, was in saved.items():
        now = shapes.get(key)
        now = (math.prod(now),) if key == STATES and now else now
        was, now = (tuple(was) if was else None), (tuple(now) if now else None)
        if was != now:
            problems.append(f"{key} is {list(was) if was else 'absent'} in the checkpoint, "
                            f"{list(now) if now else 'absent'} in {env.id}")
    return problems


def check_suites(state: dict[str, Any], configs: dict[str, Config], checkpoint: Path | None) -> None:
    """Every suite's shapes against the checkpoint, before any env is built: ``CheckpointError`` naming each suite
    and key that differs; ``ValueError`` naming a suite that cannot run here (e.g. its files are missing)."""
    problems = []
    for env_id, cfg in configs.items():
        try:
            problems += [f"{env_id}: {p}" for p in shape_problems(state.get("policy_spec") or {}, cfg.resolved_eval_env())]
        except (RuntimeError, OSError, ValueError) as exc:  # e.g. LIBERO-PRO files the installed package lacks
            raise ValueError(f"--suites {env_id}: {exc}") from None
    if problems:
        raise CheckpointError(f"checkpoint {checkpoint} does not fit (checked before any env is built):\n  "
                              + "\n  ".join(problems))


def evaluate_suites(cfg: Config, checkpoint: Path | None, suites: str | list[str], episodes: int | None,
                    out_dir: Path, video: bool = False, sample: bool = False) -> dict[str, Any]:
    """Evaluate ``checkpoint`` on each suite ``suites`` names; write ``out_dir/eval.json`` and ``suites.png``;
    return the combined report (``table`` holds the text table). ``checkpoint`` None: the policy as ``cfg``
    builds it (a pretrained folder in ``policy.model_path``); its shapes are then checked by each suite's eval."""
    ids = expand_suites(suites)
    configs = {env_id: suite_config(cfg, env_id) for env_id in ids}
    state = load_checkpoint(checkpoint) if checkpoint is not None else {}
    check_suites(state, configs, checkpoint)
    axes = {env_id: suite_axis(env_id) for env_id in ids}
    results, reports, skipped = {}, {}, {}
    backend = make_backend(cfg.cluster, user_packages(cfg))  # one for every suite: a Ray instance starts once
    try:
        for env_id in ids:
            try:
                report = evaluate_checkpoint(configs[env_id], checkpoint, episodes, out_dir / env_id, video, sample,
                                             same_env=False, backend=backend)
            except ClusterLostError:
                raise
            except Exception as exc:  # noqa: BLE001 - the other suites go on; the table says why this one is missing
                if len(skipped) + 1 == len(ids):
                    raise
                skipped[env_id] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                warnings.warn(f"--suites {env_id} failed, the others go on: {skipped[env_id]}", stacklevel=2)
                continue
            results[env_id], reports[env_id] = report.episodes, report.to_json()
    finally:
        backend.shutdown()
    ids = [env_id for env_id in ids if env_id in results]
    rows = suite_rows(results, axes)
    combined = {
        "checkpoint": checkpoint_name(cfg, checkpoint), "iteration": int(state.get("iteration", 0)),
        "deterministic": not sample,
        "suites": [r.to_json() for r in rows], "not_evaluated": skipped,
        "eval_json": {env_id: str(out_dir / env_id / "eval.json") for env_id in ids},
        "videos": {env_id: reports[env_id]["videos"] for env_id in ids if reports[env_id]["videos"]},
        "provenance": {env_id: reports[env_id]["provenance"] for env_id in ids},
        "episodes": [rec for env_id in ids for rec in episode_records(env_id, axes[env_id][1], reports[env_id])],
    }
    write_json(out_dir / "eval.json", combined)
    title = f"{checkpoint.parent.parent.name}/{checkpoint.name}" if checkpoint is not None else \
        checkpoint_name(cfg, checkpoint).removeprefix("no checkpoint: ")
    plot_suites(rows, out_dir / "suites.png", title)
    table = format_suite_table(rows, skipped)
    (out_dir / "table.txt").write_text(table + "\n")
    return combined | {"table": table}


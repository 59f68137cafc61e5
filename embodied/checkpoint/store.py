"""Checkpoints: one folder per saved iteration, with a manifest, written atomically.

    <run_dir>/checkpoints/iter_000100/
        trainer.pt     iteration, env_steps, config, wandb_id, rng, actor: {optimizer, version, policy}
        policy/        for policies that export themselves (``Policy.exports_pretrained``, e.g. the VLA):
                       their ``save_pretrained`` folder, which transformers / peft open alone; then
                       ``actor.policy`` is absent from trainer.pt
        replay/        an off-policy actor's replay buffer (``algorithm.checkpoint_replay``) as chunk files and
                       replay.json (``embodied.replay.buffer.ReplayBuffer.save``); chunks unchanged since the
                       previous checkpoint are hard links to its files
        manifest.json  format version, components, package versions, env id and spaces, and the
                       sha256 of every file

A folder is built under a temp name, fsynced and renamed, so a crash leaves the previous
checkpoints and a ``*.tmp<pid>`` folder that the next start removes (``remove_partial``). The
*latest* checkpoint of a run is its newest valid one: a folder whose files fail their checksums,
that cannot be read, or whose weights are not finite is skipped with a warning. Everything loads
with ``torch.load(weights_only=True)``: state dicts and plain types only.

``load_resume_point`` turns one (or a run dir: its latest) back into where training goes on;
``load_policy_state`` puts a checkpoint's weights into a policy (actor, rollout or eval).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied.checkpoint.migrate import FORMAT_VERSION, migrate
from embodied.config.schema import algorithm_config_class
from embodied.core.atomic import DiskFullError, atomic_dir, disk_full, remove_temp_files
from embodied.core.registry import UnknownNameError

CHECKPOINT_NAME = re.compile(r"iter_\d+")  # iter_000100; temp folders (iter_000100.tmp123) never match
TRAINER_FILE = "trainer.pt"
POLICY_DIR = "policy"
REPLAY_DIR = "replay"
MANIFEST_FILE = "manifest.json"
PACKAGES = ("embodied", "torch", "numpy", "gymnasium", "mujoco", "transformers", "peft")


class CheckpointError(ValueError):
    """A checkpoint that cannot be written, read or used here; the message names its path."""


def save_checkpoint(path: Path, state: dict[str, Any], policy: Any = None,
                    write_more: Callable[[Path], None] | None = None) -> Path:
    """Write the folder ``path`` atomically: ``state`` as trainer.pt, an exporting ``policy`` under policy/,
    whatever ``write_more(folder)`` adds to the folder being built (the replay buffer), and manifest.json last.
    A full disk raises ``DiskFullError`` naming ``path``; nothing half-written stays, and the checkpoints
    already there are untouched."""
    path = Path(path)
    try:
        with atomic_dir(path) as tmp:
            torch.save(state, tmp / TRAINER_FILE)
            if policy is not None and getattr(policy, "exports_pretrained", False):
                policy.save_pretrained(tmp / POLICY_DIR)
            if write_more is not None:
                write_more(tmp)
            write_manifest(tmp, state)
    except (OSError, RuntimeError) as exc:
        if disk_full(exc, path):
            raise DiskFullError(f"no space left on device writing checkpoint {path} "
                                f"({_free_mb(path)} MB free): {exc}") from exc
        raise CheckpointError(f"writing checkpoint {path} failed: {exc}") from exc
    return path


def _free_mb(path: Path) -> str:
    try:
        folder = next(p for p in (path, *path.parents) if p.exists())
        return f"{shutil.disk_usage(folder).free / 2**20:.0f}"
    except (OSError, StopIteration):
        return "?"


def write_manifest(folder: Path, state: dict[str, Any]) -> None:
    """manifest.json of a checkpoint folder whose other files are written."""
    files = {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    config = state.get("config") or {}
    manifest = {
        "format_version": FORMAT_VERSION,
        "iteration": state.get("iteration"),
        "components": sorted({name.split("/")[0] for name in files}),
        "packages": {name: package_version(name) for name in PACKAGES},
        "env": {"id": (config.get("env") or {}).get("id"), "spaces": state.get("policy_spec")},
        "policy_type": (config.get("policy") or {}).get("type"),
        "score": state.get("score"),  # {metric: value} of the iteration's eval (runner.keep_best), or None
        "sha256": files,
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")


def package_version(package: str) -> str | None:
    """The installed version of ``package``, or None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(path: Path) -> dict[str, Any] | None:
    """A checkpoint folder's manifest (None for a format-1 checkpoint, which has none)."""
    file = Path(path) / MANIFEST_FILE
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{file}: not a readable manifest: {exc}") from None


def save_policy_checkpoint(path: Path, policy: Any, optimizer: Any, version: int, spec: Any,
                           extra: dict[str, Any], actor_extra: dict[str, Any] | None = None,
                           write_more: Callable[[Path], None] | None = None) -> Path:
    """A checkpoint folder of a trained policy (RL actor or SFT): trainer state ``extra`` plus the policy
    (and what ``write_more`` adds, see ``save_checkpoint``).

    ``actor`` holds the optimizer, the version and, unless the policy exports itself, its state
    dict; ``policy_spec`` records what the policy acts in, so ``init_from``, eval and resume can
    refuse a checkpoint that does not fit. Non-finite weights are refused: they are never saved.
    """
    bad = non_finite_tensors(policy.state_dict())
    if bad:
        raise CheckpointError(f"not writing checkpoint {path}: the policy's weights are not finite ({', '.join(bad)})")
    actor: dict[str, Any] = {"optimizer": optimizer.state_dict(), "version": version, **(actor_extra or {})}
    if not policy.exports_pretrained:
        actor["policy"] = policy.state_dict()
    return save_checkpoint(path, {**extra, "actor": actor, "policy_spec": dataclasses.asdict(spec)}, policy,
                           write_more)


def non_finite_tensors(tensors: dict[str, Any], limit: int = 3) -> list[str]:
    """Names of (up to ``limit``) floating tensors holding NaN or inf."""
    bad = [name for name, t in tensors.items()
           if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    return bad[:limit] + ([f"and {len(bad) - limit} more"] if len(bad) > limit else [])


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The trainer state of a checkpoint folder, verified and in today's form (``embodied.checkpoint.migrate``);
    ``actor.policy_dir`` names its exported policy and ``actor.replay_dir`` its replay folder, if it has them.

    Raises ``CheckpointError`` naming the file and what is wrong: missing, failing its checksums,
    not loadable with ``weights_only=True``, or holding non-finite weights.
    """
    path = Path(path)
    trainer = path / TRAINER_FILE if path.is_dir() else path
    if not trainer.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist (no {TRAINER_FILE})")
    if trainer.name == TRAINER_FILE:
        verify_files(trainer.parent)
    try:
        state = torch.load(trainer, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file; all mean the same here
        raise CheckpointError(f"{trainer}: not a readable checkpoint ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{trainer}: not a checkpoint (holds a {type(state).__name__}, not a dict)")
    manifest = read_manifest(trainer.parent) if trainer.name == TRAINER_FILE else None
    state = migrate(state, int(manifest.get("format_version", 1)) if manifest else 1)  # older formats: today's form
    actor = state.get("actor")
    if isinstance(actor, dict) and isinstance(actor.get("policy"), dict):
        bad = non_finite_tensors(actor["policy"])
        if bad:
            raise CheckpointError(f"{trainer}: the policy's weights are not finite ({', '.join(bad)})")
    if (trainer.parent / POLICY_DIR).is_dir() and isinstance(actor, dict):
        actor["policy_dir"] = str(trainer.parent / POLICY_DIR)
    if (trainer.parent / REPLAY_DIR).is_dir() and isinstance(actor, dict):
        actor["replay_dir"] = str(trainer.parent / REPLAY_DIR)
    return state


def verify_files(folder: Path) -> None:
    """Check every file the manifest lists against its sha256 (format-1 folders have nothing to check)."""
    manifest = read_manifest(folder)
    if manifest is None:
        return
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"{folder / MANIFEST_FILE}: checkpoint format {version!r} is newer than this "
                              f"embodied reads ({FORMAT_VERSION}); upgrade embodied")
    for name, digest in manifest.get("sha256", {}).items():
        file = folder / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (listed in {MANIFEST_FILE})")
        if _sha256(file) != digest:
            raise CheckpointError(f"{file}: checksum mismatch (truncated or modified after it was written)")


def load_policy_state(policy: torch.nn.Module, actor_state: dict[str, Any]) -> None:
    """Load a checkpoint's policy weights (its exported folder, or its state dict) into ``policy``."""
    if actor_state.get("policy_dir"):
        policy.load_pretrained(actor_state["policy_dir"])
    elif "policy" in actor_state:
        policy.load_state_dict(actor_state["policy"])
    else:
        raise ValueError("the checkpoint holds no policy weights (neither policy/ nor actor.policy)")


def load_init_from(policy: Any, path: str, action_dim: int) -> None:
    """Start ``policy`` (a new ``embodied.policy.base.Policy``) from the checkpoint ``policy.init_from`` names:
    its weights, checked against the env's ``action_dim``, then the policy's ``after_init_from`` (what it resets
    rather than inherit, e.g. a widened action spread). A resume loads its own state over this afterwards."""
    state = load_checkpoint(find_checkpoint(path))
    check_policy_spec(state, action_dim, "policy.init_from")
    load_policy_state(policy, state["actor"])
    policy.after_init_from()


def is_checkpoint(path: Path) -> bool:
    return (path / TRAINER_FILE).is_file()


def checkpoints_in(folder: Path) -> list[Path]:
    """The checkpoint folders of a ``checkpoints/`` folder, oldest first (valid or not)."""
    return sorted(p for p in folder.iterdir() if CHECKPOINT_NAME.fullmatch(p.name) and is_checkpoint(p)) \
        if folder.is_dir() else []


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder (or a trainer file) itself; for a run dir (or its ``checkpoints/``), its
    newest valid checkpoint: newer ones that fail ``load_checkpoint`` are skipped with a warning."""
    path = Path(path)
    if path.is_file() or is_checkpoint(path):
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{str(path)!r} is neither a checkpoint nor a run directory")
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = checkpoints_in(folder)
    if not found:
        raise FileNotFoundError(f"no checkpoints (iter_*/{TRAINER_FILE}) in {str(folder)!r}")
    problems = []
    for candidate in reversed(found):  # zero-padded iteration numbers sort in order
        try:
            load_checkpoint(candidate)
        except CheckpointError as exc:
            warnings.warn(f"skipping checkpoint {candidate.name}: {exc}", stacklevel=2)
            problems.append(str(exc))
            continue
        return candidate
    raise CheckpointError(f"no valid checkpoint in {folder}:\n  " + "\n  ".join(problems))


def remove_partial(run_dir: Path) -> None:
    """Remove the temp folders of checkpoint writes a killed run left in ``run_dir/checkpoints``."""
    for leftover in remove_temp_files(run_dir / "checkpoints"):
        warnings.warn(f"removed {leftover}: a checkpoint write that did not finish", stacklevel=2)


def prune_checkpoints(run_dir: Path, keep: int, best: str | None = None, mode: str = "max") -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints of a run (0: keep all) and, with ``best`` (a metric name), the
    one whose manifest's score on it is best (``mode``: "max" or "min"; ties: the newest); returns the deleted ones.
    Called only after a checkpoint was written whole: a save that failed prunes nothing."""
    found = checkpoints_in(run_dir / "checkpoints")
    doomed = found[:-keep] if 0 < keep < len(found) else []
    champion = best_checkpoint(found, best, mode) if best else None
    doomed = [old for old in doomed if old != champion]
    for old in doomed:
        shutil.rmtree(old, ignore_errors=True)
    return doomed


def best_checkpoint(found: list[Path], metric: str, mode: str = "max") -> Path | None:
    """The checkpoint among ``found`` (oldest first) whose manifest scores best on ``metric`` (the newest of equals);
    None when none was scored."""
    scored = []
    for folder in found:
        try:
            score = (read_manifest(folder) or {}).get("score") or {}
        except CheckpointError:
            continue
        value = score.get(metric)
        if isinstance(value, (int, float)) and value == value:  # not NaN
            scored.append((value if mode == "max" else -value, folder))
    return max(reversed(scored), key=lambda item: item[0])[1] if scored else None  # newest first: ties go to it


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to."""
    checkpoint = checkpoint.parent if checkpoint.is_file() and checkpoint.name == TRAINER_FILE else checkpoint
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


@dataclass
class ResumePoint:
    """Where a resumed run goes on: its run dir, counters, actor state and wandb run."""

    checkpoint: Path
    run_dir: Path
    iteration: int  # the last iteration done; training goes on with iteration + 1
    env_steps: int
    actor: dict[str, Any]  # ActorWorker.state(): policy (or policy_dir), optimizer, version
    wandb_id: str | None
    state: dict[str, Any] = dataclasses.field(default_factory=dict)  # the whole trainer state (config, rng, ...)


def load_resume_point(path: str | Path) -> ResumePoint:
    """Read the checkpoint ``path`` names (a checkpoint folder, or a run dir: its latest checkpoint)."""
    checkpoint = find_checkpoint(path)
    state = load_checkpoint(checkpoint)
    missing = [k for k in ("iteration", "env_steps", "actor") if k not in state]
    if missing:
        raise ValueError(f"checkpoint {checkpoint} cannot be resumed from: it lacks {missing}")
    return ResumePoint(checkpoint, run_dir_of(checkpoint), int(state["iteration"]), int(state["env_steps"]),
                       state["actor"], state.get("wandb_id"), state)


def check_init_from(path: str, policy: Any) -> Path:
    """The checkpoint ``policy.init_from`` names, if its policy fits ``policy`` (a ``PolicyConfig``;
    else ``ValueError``).

    Checked in the driver before any worker starts: the checkpoint exists and holds a policy of
    the same type and chunk length, and the same value of each of the config's
    ``architecture_fields`` (a VLA's action head, say). ``policy`` is the config as its algorithm trains it
    (``AlgorithmConfig.trained_policy``), and the checkpoint's type is read the same way (``trained_type``).
    The action dimension is checked against the env's when the actor loads it (``check_policy_spec``).
    """
    policy_type, action_chunk = policy.type, policy.action_chunk
    try:
        checkpoint = find_checkpoint(path)
        state = load_checkpoint(checkpoint)
    except (FileNotFoundError, CheckpointError) as exc:
        raise ValueError(f"policy.init_from: {exc}") from None
    from embodied.config.loader import saved_form

    config = state.get("config") or {}
    config = saved_form(config) if isinstance(config.get("policy"), dict) else config  # renames, aliases (mlp_sac)
    saved = config.get("policy") or {}
    saved_type = trained_type(config, policy_type)
    problems = []
    if saved_type != policy_type:
        problems.append(f"it holds a policy.type={saved_type!r} policy, this config trains {policy_type!r}")
    if saved.get("action_chunk", action_chunk) != action_chunk:
        problems.append(f"its policy.action_chunk is {saved['action_chunk']}, this config's is {action_chunk}")
    if not problems:
        for name, mine in policy.architecture().items():
            theirs = saved.get(name, policy.architecture_default(name))
            if theirs != mine:
                problems.append(f"its policy.{name} is {theirs!r}, this config's is {mine!r}")
    if problems:
        raise ValueError(f"policy.init_from: checkpoint {checkpoint} does not fit: {'; '.join(problems)}")
    return checkpoint


def trained_type(config: dict[str, Any], default: str) -> str:
    """The policy type a run with this saved ``config`` (in today's form: ``saved_form``) trained: its
    ``policy.type``, with the head its algorithm put on it (``AlgorithmConfig.policy_head``: ``"mlp/tanh_gaussian"``);
    ``default`` when it names none."""
    name = (config.get("policy") or {}).get("type")
    if name is None:  # a checkpoint whose config names none is taken for what it is asked to be
        return default
    algorithm = (config.get("algorithm") or {}).get("name")
    try:
        head = algorithm_config_class(str(algorithm)).policy_head if algorithm else ""
    except (UnknownNameError, ImportError, TypeError):
        head = ""
    return f"{name}/{head}" if head else name


def check_policy_spec(state: dict[str, Any], action_dim: int, where: str) -> None:
    """Refuse a checkpoint whose policy acts in another number of action dimensions than the env."""
    saved = (state.get("policy_spec") or {}).get("action_dim")
    if saved is not None and saved != action_dim:
        raise ValueError(f"{where}: the checkpoint's policy acts in {saved} action dimensions, the env in {action_dim}")


def trained_env_ids(state: dict[str, Any]) -> set[str]:
    """The env ids a checkpoint's run trained and evaluated on (empty if it does not say)."""
    config = state.get("config") or {}
    env_id = (config.get("env") or {}).get("id")
    eval_id = (config.get("eval_env") or {}).get("id") or env_id
    return env_ids(env_id) | env_ids(eval_id)


def env_ids(value: str | list[str] | None) -> set[str]:
    """The env ids an ``env.id`` value names: one id, a mixture's list, a named set's ids."""
    from embodied.core.registry import ENV_SETS

    names = [] if not value else [value] if isinstance(value, str) else list(value)
    return {i for n in names for i in (ENV_SETS.resolve(n) if n in ENV_SETS else [n])}


def check_env_fits(state: dict[str, Any], env_id: str | list[str], spec: Any, where: str,
                   same_id: bool = True) -> None:
    """Refuse (``CheckpointError``) a checkpoint trained on another env (unless not ``same_id``: an eval over
    other suites), or whose policy's spaces differ from the env's (``spec``: a ``PolicySpec``, or None to check
    the id alone); names what differs."""
    problems = []
    trained = trained_env_ids(state)
    if same_id and trained and not env_ids(env_id) <= trained:
        problems.append(f"it was trained on {' and '.join(sorted(trained))}, this config's env is {env_id}")
    saved = state.get("policy_spec")
    if saved and spec is not None:
        for key, now in dataclasses.asdict(spec).items():
            if key in saved and _plain(saved[key]) != _plain(now):
                problems.append(f"{key} is {_plain(saved[key])} in the checkpoint, {_plain(now)} in the env")
    if problems:
        raise CheckpointError(f"{where}: checkpoint does not fit: {'; '.join(problems)}")


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value

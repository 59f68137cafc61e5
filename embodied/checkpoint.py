"""Checkpoints: one folder per saved iteration, written atomically (temp folder, then rename).

    <run_dir>/checkpoints/iter_000100/
        trainer.pt   iteration, env_steps, config, wandb_id, actor: {optimizer, version, policy}
        policy/      for policies that export themselves (``Policy.exports_pretrained``, e.g. the VLA):
                     their ``save_pretrained`` folder, which transformers / peft open alone; then
                     ``actor.policy`` is absent from trainer.pt

``load_resume_point`` turns one (or a run dir: its latest) back into where training goes on;
``load_policy_state`` puts a checkpoint's weights into a policy (actor, rollout or eval).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied.atomic import atomic_dir

CHECKPOINT_GLOB = "iter_*"
TRAINER_FILE = "trainer.pt"
POLICY_DIR = "policy"


def save_checkpoint(path: Path, state: dict[str, Any], policy: Any = None) -> Path:
    """Write the folder ``path`` atomically: ``state`` as trainer.pt, an exporting ``policy`` under policy/."""
    with atomic_dir(Path(path)) as tmp:
        torch.save(state, tmp / TRAINER_FILE)
        if policy is not None and getattr(policy, "exports_pretrained", False):
            policy.save_pretrained(tmp / POLICY_DIR)
    return Path(path)


def save_policy_checkpoint(path: Path, policy: Any, optimizer: Any, version: int, spec: Any,
                           extra: dict[str, Any]) -> Path:
    """A checkpoint folder of a trained policy (RL actor or SFT): trainer state ``extra`` plus the policy.

    ``actor`` holds the optimizer, the version and, unless the policy exports itself, its state
    dict; ``policy_spec`` records what the policy acts in, so ``init_from`` and eval can refuse a
    checkpoint that does not fit.
    """
    actor: dict[str, Any] = {"optimizer": optimizer.state_dict(), "version": version}
    if not policy.exports_pretrained:
        actor["policy"] = policy.state_dict()
    return save_checkpoint(path, {**extra, "actor": actor, "policy_spec": dataclasses.asdict(spec)}, policy)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The trainer state of a checkpoint folder; ``actor.policy_dir`` names its exported policy, if any."""
    path = Path(path)
    trainer = path / TRAINER_FILE if path.is_dir() else path
    if not trainer.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist (no {TRAINER_FILE})")
    state = torch.load(trainer, map_location="cpu", weights_only=False)
    if (trainer.parent / POLICY_DIR).is_dir() and isinstance(state.get("actor"), dict):
        state["actor"]["policy_dir"] = str(trainer.parent / POLICY_DIR)
    return state


def load_policy_state(policy: torch.nn.Module, actor_state: dict[str, Any]) -> None:
    """Load a checkpoint's policy weights (its exported folder, or its state dict) into ``policy``."""
    if actor_state.get("policy_dir"):
        policy.load_pretrained(actor_state["policy_dir"])
    elif "policy" in actor_state:
        policy.load_state_dict(actor_state["policy"])
    else:
        raise ValueError("the checkpoint holds no policy weights (neither policy/ nor actor.policy)")


def is_checkpoint(path: Path) -> bool:
    return (path / TRAINER_FILE).is_file()


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder (or a trainer file) itself; for a run dir (or its ``checkpoints/``), its latest."""
    path = Path(path)
    if path.is_file() or is_checkpoint(path):
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{str(path)!r} is neither a checkpoint nor a run directory")
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = sorted(p for p in folder.glob(CHECKPOINT_GLOB) if is_checkpoint(p))
    if not found:
        raise FileNotFoundError(f"no checkpoints ({CHECKPOINT_GLOB}/{TRAINER_FILE}) in {str(folder)!r}")
    return found[-1]  # zero-padded iteration numbers sort in order


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


def load_resume_point(path: str | Path) -> ResumePoint:
    """Read the checkpoint ``path`` names (a checkpoint folder, or a run dir: its latest checkpoint)."""
    checkpoint = find_checkpoint(path)
    state = load_checkpoint(checkpoint)
    missing = [k for k in ("iteration", "env_steps", "actor") if k not in state]
    if missing:
        raise ValueError(f"checkpoint {checkpoint} cannot be resumed from: it lacks {missing}")
    return ResumePoint(checkpoint, run_dir_of(checkpoint), int(state["iteration"]), int(state["env_steps"]),
                       state["actor"], state.get("wandb_id"))


def check_init_from(path: str, policy_type: str, action_chunk: int) -> Path:
    """The checkpoint ``policy.init_from`` names, if its policy fits this config (else ``ValueError``).

    Checked in the driver before any worker starts: the checkpoint exists and holds a policy of
    the same type and chunk length. The action dimension is checked against the env's when the
    actor loads it (``check_policy_spec``).
    """
    try:
        checkpoint = find_checkpoint(path)
        state = load_checkpoint(checkpoint)
    except FileNotFoundError as exc:
        raise ValueError(f"policy.init_from: {exc}") from None
    saved = state.get("config", {}).get("policy", {})
    problems = []
    if saved.get("type", policy_type) != policy_type:
        problems.append(f"it holds a policy.type={saved['type']!r} policy, this config trains {policy_type!r}")
    if saved.get("action_chunk", action_chunk) != action_chunk:
        problems.append(f"its policy.action_chunk is {saved['action_chunk']}, this config's is {action_chunk}")
    if problems:
        raise ValueError(f"policy.init_from: checkpoint {checkpoint} does not fit: {'; '.join(problems)}")
    return checkpoint


def check_policy_spec(state: dict[str, Any], action_dim: int, where: str) -> None:
    """Refuse a checkpoint whose policy acts in another number of action dimensions than the env."""
    saved = (state.get("policy_spec") or {}).get("action_dim")
    if saved is not None and saved != action_dim:
        raise ValueError(f"{where}: the checkpoint's policy acts in {saved} action dimensions, the env in {action_dim}")

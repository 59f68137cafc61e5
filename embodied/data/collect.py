"""``embodied collect``: scripted-expert episodes recorded through the env workers, written as a dataset.

    report = collect(load_config("configs/pick_place_mlp_sft.yaml"), episodes=200, out=Path("data/pp"))

Episode ``k`` starts from seed ``experiment.seed + k`` (training seeds; eval's are far apart).
The training env config is used with auto-reset off: every env worker resets its envs, drives
them with their experts (``embodied.envs.experts``, closed-loop per sub-step, chunks of
``policy.action_chunk``) until each episode ends, and hands back the episodes. Only successful
episodes are kept unless ``keep_failed``; the dataset folder appears only when complete.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from embodied.config import Config, ConfigError
from embodied.data.format import FORMAT_VERSION, IMAGE_KEYS, write_dataset
from embodied.placement import make_backend
from embodied.registry import ENVS
from embodied.types import STATES


@dataclass
class CollectReport:
    path: Path
    episodes: int  # episodes written
    attempted: int  # episodes run
    successes: int  # successful episodes among those run
    rows: int  # chunk steps written


def expert_tasks() -> list[str]:
    """Registered env ids that have a scripted expert."""
    from embodied.envs.experts import has_expert

    found = []
    for name in ENVS.names():
        try:
            target = ENVS.resolve(name)
        except Exception:  # noqa: BLE001 - an extra that is not installed has no expert either
            continue
        if has_expert(target):
            found.append(name)
    return found


def check_expert(cfg: Config) -> None:
    """Fail before any worker starts when the env has no scripted expert, listing those that do."""
    from embodied.envs.experts import has_expert

    if not has_expert(ENVS.resolve(cfg.env.id)):
        raise ConfigError(f"env.id: {cfg.env.id!r} has no scripted expert to collect demonstrations from; "
                          f"tasks with one: {', '.join(expert_tasks())}")


def collect(cfg: Config, episodes: int, out: Path, keep_failed: bool = False) -> CollectReport:
    """Record ``episodes`` kept expert episodes of ``cfg.env`` into the dataset folder ``out``."""
    from tqdm import tqdm

    from embodied.workers.group import start_env_group

    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {episodes}")
    if Path(out).exists():
        raise ConfigError(f"--out {str(out)!r} exists; choose a new folder (a dataset is never overwritten)")
    check_expert(cfg)
    env_cfg = dataclasses.replace(cfg.env, auto_reset=False)
    chunk = cfg.policy.action_chunk
    chunk_steps = math.ceil(env_cfg.max_episode_steps / chunk)
    backend = make_backend(cfg.cluster)
    kept: list[dict] = []
    attempted = successes = 0
    try:
        group = start_env_group(cfg, backend, env_cfg, "collect", cfg.experiment.seed).group
        spec = backend.wait(group.call("spec"))[0]
        bar = tqdm(total=episodes, desc="collect", unit="episode", disable=not sys.stderr.isatty())
        # A round runs env.num_envs episodes; at most 20x the asked number are tried (an expert that fails).
        while len(kept) < episodes and attempted < 20 * episodes:
            parts = backend.wait(group.call("collect_round", chunk, chunk_steps, cfg.experiment.seed + attempted))
            found = sorted((ep for part in parts for ep in part), key=lambda ep: ep["seed"])
            attempted += env_cfg.num_envs
            successes += sum(ep["success"] for ep in found)
            new = [ep for ep in found if keep_failed or ep["success"]][: episodes - len(kept)]
            kept += new
            bar.update(len(new))
        bar.close()
        backend.wait(group.call("close"))
    finally:
        backend.shutdown()
    if not kept:
        raise RuntimeError(f"no episode of {attempted} succeeded; nothing written (use --all to keep failures)")
    sample = kept[0]["obs"][0]
    meta = {
        "format_version": FORMAT_VERSION, "env_id": env_cfg.id, "obs_mode": env_cfg.obs_mode,
        "max_episode_steps": env_cfg.max_episode_steps, "env_kwargs": env_cfg.kwargs, "action_chunk": chunk,
        "action_dim": spec.action_dim, "action_low": list(spec.action_low), "action_high": list(spec.action_high),
        "state_dim": int(sample[STATES].shape[0]) if STATES in sample else 0,
        "image_shapes": {k: list(sample[k].shape) for k in IMAGE_KEYS if k in sample},
        "episodes": len(kept), "successes_kept": sum(ep["success"] for ep in kept), "episodes_attempted": attempted,
        "expert_success_rate": successes / attempted, "expert": "embodied.envs.experts", "seed": cfg.experiment.seed,
        "created_by": "embodied collect " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["collect"] else "collect()",
    }
    path = write_dataset(Path(out), kept, meta)
    return CollectReport(path, len(kept), attempted, successes, sum(len(ep["obs"]) for ep in kept))

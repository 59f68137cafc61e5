"""``embodied collect``: scripted-expert episodes recorded through the env workers, written as a dataset.

    report = collect(load_config("configs/pick_place_mlp_sft.yaml"), episodes=200, out=Path("data/pp"))
    report = collect(cfg, episodes=200, out=Path("data/pp_lerobot"), data_format="lerobot")

The training env config (``cfg.env``: any task with a scripted expert, any obs mode) runs in the
same ``EnvWorker``s as RL, on the backend ``cluster`` names, with auto-reset off. Each round every
env worker resets its envs (env ``i`` of the round's batch to seed ``experiment.seed + k + i``, ``k``
the episodes run so far, so run episode ``k`` always starts from seed ``experiment.seed + k``),
lets their experts (``embodied.envs.experts``, closed loop per sub-step) play chunks of
``policy.action_chunk`` sub-steps until every episode ends, and hands back the episodes. Only
successful ones are kept unless ``keep_failed``. Kept episodes are written as they come
(``dataset_writer``: a record batch every ``BATCH_MB`` of rows, a new Arrow file every ``SHARD_MB``;
``lerobot_writer``: episode by episode), so memory holds a round and a batch, never the dataset
(an 8,000-episode image collect that kept them all ran out of 24 GB). They go into a temp folder
beside ``out`` renamed only when complete, so an interrupted collect leaves no dataset behind, and a
full disk leaves none either (``DiskFullError`` names ``out``, the space free and, for embodied's
format, about the space needed). A killed collect can leave that temp folder
(``<out>.tmp<pid>``); the next collect over the same ``out`` removes it before it starts. An ``out``
that holds a dataset is replaced only with ``overwrite``, and only once the new one is complete.

``data_format="lerobot"`` writes a LeRobot v3.0 folder instead (``embodied.data.lerobot.writer``):
its rows are frames, one per control step, so the experts play chunks of one sub-step (they pick
every sub-action from the state then, so the episodes are those of any chunk length; with ``noise``
its draws come in another order, so noisy episodes differ) and ``fps`` is the env's control
frequency (``env_factory.control_frequency``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from embodied import __version__
from embodied.core import seeds
from embodied.backends import make_backend, user_packages
from embodied.config import Config, ConfigError, EnvConfig
from embodied.core.atomic import remove_stale_temps
from embodied.core.registry import ENVS
from embodied.data.demonstrations import Format, detect_format
from embodied.data.format import IMAGE_KEYS, DatasetWriter, DemoEpisode, Meta, dataset_writer

if TYPE_CHECKING:
    from embodied.data.lerobot.writer import LeRobotWriter
    from embodied.policy.base import PolicySpec

MAX_ATTEMPTS_PER_EPISODE = 20  # an expert that keeps failing stops the collection at 20x the episodes asked


class CollectError(RuntimeError):
    """The expert produced no episode worth keeping; nothing was written."""


@dataclass
class CollectReport:
    """What ``collect`` wrote."""

    path: Path
    episodes: int  # episodes written
    attempted: int  # episodes the expert ran
    successes: int  # successful episodes among those run
    rows: int  # rows written: chunk steps (embodied's format) or frames (LeRobot)
    seconds: float  # wall-clock of the collection (workers up to dataset written)
    meta: Meta | None = None
    data_format: Format = "arrow"
    removed: list[Path] = dataclasses.field(default_factory=list)  # temp folders of killed collects, cleared
    replaced: bool = False  # ``out`` held a dataset, now replaced (``overwrite``)


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
    """Fail before any worker starts when ``env.id`` has no scripted expert, listing the tasks that do."""
    from embodied.envs.experts import has_expert

    for env_id in cfg.env.members():  # every member of a mixture
        target = ENVS.resolve(env_id)
        if not has_expert(target):
            raise ConfigError(f"env.id: {env_id!r} has no scripted expert to collect demonstrations from; "
                              f"tasks with one: {', '.join(expert_tasks())}")
        # An expert that needs the env built a certain way says so (a ManiSkill motion plan: joint-position control).
        check = getattr(getattr(target, "scripted_expert", None), "check_env_config", None)
        problem = check(dict(cfg.env.kwargs)) if check is not None else ""
        if problem:
            raise ConfigError(f"{problem} (env.id {env_id!r}: its scripted expert needs it)")


def collect(cfg: Config, episodes: int, out: Path, keep_failed: bool = False,
            created_by: str = "embodied.runs.collect.collect()", noise: float = 0.0,
            data_format: Format = "arrow", overwrite: bool = False) -> CollectReport:
    """Record ``episodes`` expert episodes of ``cfg.env`` (successful ones unless ``keep_failed``) into ``out``,
    as embodied's Arrow dataset or (``data_format="lerobot"``) a LeRobot v3.0 folder.

    ``noise`` > 0 perturbs the executed actions (DART): the env runs the expert's action plus
    Gaussian noise of ``noise`` x half the action range, the dataset records the expert's action,
    so a cloned policy also learns to recover from states just off the expert's path.

    ``created_by`` (the command) goes into ``meta.json``. Raises ``ConfigError`` (before any worker
    starts) for a task without an expert or an ``out`` it may not write (``check_out``), ``CollectError``
    if nothing is kept, ``DiskFullError`` if the disk fills while writing.
    """
    import time

    from tqdm import tqdm

    from embodied.workers.launch import start_env_group

    t0 = time.perf_counter()
    out = Path(out)
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {episodes}")
    if not 0.0 <= noise <= 1.0:
        raise ConfigError(f"--noise must be in [0, 1] (a fraction of half the action range), got {noise}")
    if data_format not in ("arrow", "lerobot"):
        raise ConfigError(f"--format must be arrow or lerobot, got {data_format!r}")
    replaced = check_out(out, overwrite)
    check_expert(cfg)
    removed = remove_stale_temps(out)  # what a killed collect over the same out left
    env_cfg = collection_env(cfg, episodes)
    fps = lerobot_fps(env_cfg) if data_format == "lerobot" else None
    chunk = cfg.policy.action_chunk if fps is None else 1  # LeRobot rows are control steps
    chunk_steps = math.ceil(env_cfg.max_episode_steps / chunk)
    backend = make_backend(cfg.cluster, user_packages(cfg))
    attempted = successes = 0
    with contextlib.ExitStack() as stack:  # the dataset writer, opened on the first kept episode
        writer: DatasetWriter | LeRobotWriter | None = None
        try:
            group = start_env_group(cfg, backend, env_cfg, "collect", cfg.experiment.seed).group
            spec = backend.wait(group.call("spec"))[0]
            expert = backend.wait(group.call("expert_name"))[0]
            with tqdm(total=episodes, desc=f"collect {env_cfg.id}", unit="episode", dynamic_ncols=True) as bar:
                kept = 0
                while kept < episodes and attempted < MAX_ATTEMPTS_PER_EPISODE * episodes:
                    parts = backend.wait(group.call("collect_round", chunk, chunk_steps,
                                                      seeds.collect_seed(cfg.experiment.seed, attempted), noise))
                    found = [ep for part in parts for ep in part]  # env order = seed order
                    attempted += env_cfg.num_envs
                    successes += sum(ep.success for ep in found)
                    new = [ep for ep in found if keep_failed or ep.success][: episodes - kept]
                    if new and writer is None:
                        layout = dataset_layout(env_cfg, chunk, spec, expert, new[0], cfg.experiment.seed, noise,
                                                f"{created_by} (embodied {__version__})")
                        writer = stack.enter_context(open_writer(out, layout, fps, episodes))
                    for ep in new:  # written as they come: memory holds a round and a shard, not the dataset
                        writer.add(ep)
                    kept += len(new)
                    bar.update(len(new))
                    bar.set_postfix(expert_success=f"{successes}/{attempted}")
            backend.wait(group.call("close"))
        finally:
            backend.shutdown()
        if writer is None:
            raise CollectError(f"the expert succeeded in none of {attempted} episodes of {env_cfg.id}; nothing "
                               "written (--all keeps failed episodes)")
        meta = dataclasses.replace(writer.tally.meta(layout), episodes_attempted=attempted,
                                   successes_attempted=successes)
        writer.finish(meta)
    return CollectReport(out, meta.episodes, attempted, successes, meta.rows, time.perf_counter() - t0, meta,
                         data_format, removed, replaced)


def check_out(out: Path, overwrite: bool) -> bool:
    """Whether ``out`` holds a dataset that the collect will replace; ``ConfigError`` if it may not write there.

    A missing or empty folder is written. A dataset (either format) is replaced with ``overwrite`` only,
    and anything else never: ``overwrite`` must not delete a folder that was not a dataset by mistake.
    """
    if not out.exists():
        return False
    if out.is_dir() and not any(out.iterdir()):
        return False
    try:
        found = detect_format(out)
    except FileNotFoundError:
        raise ConfigError(f"--out {str(out)!r} exists and is not a dataset; choose a new folder (collect replaces "
                          "nothing but a dataset)") from None
    if not overwrite:
        raise ConfigError(f"--out {str(out)!r} exists and holds a dataset ({found}); choose a new folder, or pass "
                          "--overwrite to replace it (the old one stays until the new one is complete)")
    return True


def dataset_layout(env_cfg: EnvConfig, chunk: int, spec: PolicySpec, expert: str, first: DemoEpisode, seed: int,
                   noise: float, created_by: str) -> Meta:
    """The ``Meta`` of the collection before any episode is counted: what fixes the columns (chunk, action
    and state dimensions, the image shapes of ``first``) and the provenance; ``Tally.meta`` adds the counts."""
    return Meta(env_id=env_cfg.id, obs_mode=env_cfg.obs_mode, max_episode_steps=env_cfg.max_episode_steps,
                action_chunk=chunk, action_dim=spec.action_dim, action_low=[float(x) for x in spec.action_low],
                action_high=[float(x) for x in spec.action_high], state_dim=spec.state_dim,
                image_shapes={k: list(first.obs[k].shape[1:]) for k in IMAGE_KEYS if k in first.obs},
                episodes=0, successes=0, episodes_attempted=0, successes_attempted=0, rows=0, expert=expert,
                seed=seed, tasks=[], env_kwargs=dict(env_cfg.kwargs), created_by=created_by, action_noise=noise)


def open_writer(out: Path, layout: Meta, fps: int | None,
                expected_episodes: int) -> contextlib.AbstractContextManager[DatasetWriter | LeRobotWriter]:
    """The atomic writer of ``out``: embodied's Arrow format, or (``fps`` given) a LeRobot folder at ``fps``."""
    if fps is None:
        return dataset_writer(out, layout, expected_episodes=expected_episodes)
    from embodied.data.lerobot.writer import lerobot_writer

    return lerobot_writer(out, layout, fps)


def lerobot_fps(env_cfg: EnvConfig) -> int:
    """The fps of a LeRobot folder of ``env_cfg``'s episodes: the env's control frequency (an integer, as
    LeRobot stores it); ``ConfigError`` if the env does not say it or it is not whole."""
    from embodied.env_runtime.factory import control_frequency

    fps = control_frequency(env_cfg)
    if fps is None:
        raise ConfigError(f"--format lerobot: env.id {env_cfg.id!r} does not say its control frequency "
                          "(metadata['render_fps']), which a LeRobot dataset records as its fps")
    if abs(fps - round(fps)) > 1e-6:
        raise ConfigError(f"--format lerobot: env.id {env_cfg.id!r} acts at {fps:g} Hz; LeRobot records a whole "
                          "number of frames per second")
    return int(round(fps))


def collection_env(cfg: Config, episodes: int) -> EnvConfig:
    """``cfg.env`` with auto-reset off and no more envs than episodes asked (but one per worker rank), per env:
    the scripted experts act on each env's own simulator (``expert_chunk_step``); its episode cap resolved (the
    env's own when the config sets none), since chunks and the dataset's metadata follow it."""
    from embodied.env_runtime.factory import episode_steps

    c = cfg.cluster
    num_envs = max(min(cfg.env.num_envs, episodes), c.num_env_workers, c.num_rollout_workers)
    return dataclasses.replace(cfg.env, auto_reset=False, num_envs=num_envs, vectorization="per_env",
                               max_episode_steps=episode_steps(cfg.env))


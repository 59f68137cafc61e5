"""Supervised fine-tuning (behaviour cloning) from demonstrations, top to bottom.

    embodied collect configs/pick_place_mlp_sft.yaml --episodes 200 --out data/pick_place
    embodied sft configs/pick_place_mlp_sft.yaml                      # sft.dataset: data/pick_place
    embodied train configs/pick_place_mlp_ppo.yaml policy.init_from=runs/pick_place_mlp_sft-...

``sft.dataset`` is either format: embodied's own (``embodied collect``) or a LeRobot folder, whose
per-frame rows become chunks of ``policy.action_chunk`` actions at load time (docs/lerobot.md).

The loss is ``policy.supervised_loss``: the negative log-likelihood of the demonstrated action
chunks, ``-policy.evaluate(forward_inputs(obs), actions)`` averaged over executed sub-steps
(cross-entropy on the action tokens for the VLA, same bins and statistics as RL; the Gaussian
log-likelihood for the MLP and CNN), or the flow-matching loss of the VLA's flow head. Success is measured with the same ``Evaluator`` as RL, metrics go to the
same sinks and ``learning_curves.png``, and the checkpoint is the same folder format, so
``policy.init_from`` and ``embodied eval`` read it as they read an RL checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset, WeightedRandomSampler

from embodied.backends import make_backend, user_packages
from embodied.checkpoint.store import check_init_from, load_init_from, save_policy_checkpoint
from embodied.config import Config, ConfigError, EnvConfig, to_dict
from embodied.config.sections import SFTConfig
from embodied.data import Demonstrations, ReadOptions, collate, open_demonstrations
from embodied.env_runtime.factory import control_frequency
from embodied.env_runtime.preflight import check_policy_fits
from embodied.evaluation.extra import suite_metrics
from embodied.evaluation.stats import eval_metrics
from embodied.logging.logger import MetricLogger
from embodied.policy.base import Policy, build_policy
from embodied.runs.train import draw_learning_curves, make_run_dir, save_config, seed_everything
from embodied.workers.evaluator import Evaluator


@dataclass
class SFTResult:
    run_dir: Path
    checkpoint: Path
    final_eval: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)


def sft(cfg: Config) -> SFTResult:
    """Behaviour cloning of ``cfg.policy`` on ``cfg.sft.dataset``; evaluates on ``cfg``'s eval envs."""
    if cfg.sft is None:  # a recipe without an sft: section; its defaults (and the error naming sft.dataset)
        cfg = dataclasses.replace(cfg, sft=SFTConfig())
    data = open_dataset(cfg)
    if cfg.policy.init_from:  # continue SFT, or fine-tune a checkpoint on new demonstrations
        try:
            check_init_from(cfg.policy.init_from, cfg.algorithm.trained_policy(cfg.policy))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    check_policy_fits(cfg, cfg.resolved_eval_env(), "eval_env")  # before any worker starts or a run dir is made
    seed_everything(cfg.experiment.seed)
    run_dir = make_run_dir(cfg)
    save_config(cfg, run_dir)
    train_set, val_set = split_by_episode(data, cfg.sft.val_fraction, cfg.experiment.seed)
    loader = train_loader(data, train_set, cfg.sft.batch_size, cfg.sft.first_step_weight, cfg.experiment.seed)
    total = cfg.sft.epochs * len(loader)
    backend = make_backend(cfg.cluster, user_packages(cfg))
    logger: MetricLogger | None = None
    history: list[dict[str, float]] = []
    try:
        # one evaluator a member of a mixture eval env (each its own eval set), built at start and kept
        evaluators = {m: Evaluator.start(cfg.member_eval(m), backend) for m in cfg.eval_members()}
        evaluator = next(iter(evaluators.values()))
        spec = backend.wait(evaluator.envs.group.call("spec"))[0]
        policy = build_policy(cfg.algorithm.trained_policy(cfg.policy), spec)  # SFT pre-trains what RL trains
        print(policy.describe())
        if cfg.policy.init_from:
            load_init_from(policy, cfg.policy.init_from, spec.action_dim)
        try:
            data.fit(spec, cfg.policy.action_chunk, cfg.policy.required_observations())
        except ValueError as exc:
            raise dataset_error(exc) from None
        fit_input_statistics(policy, train_set, cfg.sft.batch_size)
        params = [p for p in policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=cfg.sft.lr, weight_decay=cfg.sft.weight_decay)
        schedule = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total, eta_min=0.0)
                    if cfg.sft.lr_schedule == "cosine" else None)
        average = WeightAverage(params, cfg.sft.ema_decay) if cfg.sft.ema_decay else None
        logger = MetricLogger(cfg.logger, run_dir, run_dir.name, to_dict(cfg), total, 0, None)
        step, window, t0 = 0, [], time.perf_counter()
        checkpoint: Path | None = None
        plain: list[Path] = []  # the checkpoints of sft.checkpoint_every, oldest first

        def save(step: int) -> Path:
            return save_policy_checkpoint(run_dir / "checkpoints" / f"iter_{step:06d}", policy, optimizer, step, spec,
                                          {"iteration": step, "env_steps": 0, "config": to_dict(cfg),
                                           "wandb_id": logger.wandb_id, "sft_dataset": cfg.sft.dataset})

        for _epoch in range(cfg.sft.epochs):
            for obs, actions, executed in loader:
                step += 1
                loss = bc_loss(policy, obs, actions, executed)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, cfg.sft.max_grad_norm)
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                if average is not None:
                    average.update()
                window.append(float(loss.detach()))
                evaluating = step == total or bool(cfg.sft.eval_every and step % cfg.sft.eval_every == 0)
                if evaluating or step % cfg.sft.log_every == 0:
                    metrics = {"sft/train_loss": float(np.mean(window)), "sft/epoch": step / len(loader),
                               "sft/samples_per_s": len(window) * cfg.sft.batch_size / (time.perf_counter() - t0),
                               "sft/lr": optimizer.param_groups[0]["lr"]}
                    window, t0 = [], time.perf_counter()
                    with averaged(average):  # validated, saved and evaluated: the average where sft.ema_decay keeps one
                        if len(val_set):
                            metrics["sft/val_loss"] = validation_loss(policy, val_set, cfg.sft.batch_size)
                        if evaluating:  # saved first: a stopped SFT, or an eval that fails, keeps what it learned
                            checkpoint = save(step)
                            metrics |= evaluate(evaluators, policy, step, cfg.runner.eval_episodes,
                                                cfg.runner.eval_sample)
                    logger.log(metrics, step=step)
                    history.append(metrics)
                if not evaluating and cfg.sft.checkpoint_every and step % cfg.sft.checkpoint_every == 0:
                    with averaged(average):
                        checkpoint = save(step)
                    plain.append(checkpoint)  # written whole first: a save that failed deletes nothing
                    if 0 < cfg.runner.keep_checkpoints < len(plain):  # as RL keeps its own; the evals' always stay
                        shutil.rmtree(plain.pop(0), ignore_errors=True)
        if checkpoint is None or checkpoint.name != f"iter_{step:06d}":
            with averaged(average):
                checkpoint = save(step)
        for each in evaluators.values():
            each.close()
    finally:
        if logger is not None:
            logger.close()
        backend.shutdown()
    if cfg.runner.plot:
        draw_learning_curves(run_dir)
    final = {k: v for k, v in history[-1].items() if k.startswith("eval/")} if history else {}
    return SFTResult(run_dir, checkpoint, final, history)


class WeightAverage:
    """An exponential moving average of ``params`` (``sft.ema_decay``): after each step ``avg = d * avg + (1 - d) *
    param``. A clone's last iterate moves by about the learning rate at every step, and its success swings by tens of
    points between neighbouring steps; the average of the last ~1 / (1 - d) steps is what Diffusion Policy and
    LeRobot's ACT-style recipes keep for the same reason."""

    def __init__(self, params: list[torch.Tensor], decay: float) -> None:
        self.params, self.decay = params, decay
        self.average = [p.detach().clone() for p in params]

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self.average, [p.detach() for p in self.params], 1.0 - self.decay)

    @torch.no_grad()
    def swap(self) -> None:
        """Exchange the live weights and the average (twice: back as they were)."""
        for param, avg in zip(self.params, self.average):
            held = param.detach().clone()
            param.copy_(avg)
            avg.copy_(held)


@contextlib.contextmanager
def averaged(average: WeightAverage | None) -> Iterator[None]:
    """The policy holds the averaged weights inside the block (as it is, without an average), the live ones after."""
    if average is None:
        yield
        return
    average.swap()
    try:
        yield
    finally:
        average.swap()


def open_dataset(cfg: Config) -> Demonstrations:
    """The demonstrations ``sft.dataset`` names (either format), checked before any worker starts."""
    if cfg.sft is None or not cfg.sft.dataset:
        raise ConfigError("sft.dataset: no dataset named; set it to a folder written by `embodied collect` or a "
                          "LeRobot dataset folder")
    options = ReadOptions(cfg.policy.action_chunk, cfg.sft.features, cfg.sft.frame_cache_mb)
    try:
        data = open_demonstrations(cfg.sft.dataset, options)
        data.check(cfg.policy.action_chunk, cfg.policy.required_observations())
    except (FileNotFoundError, ValueError) as exc:
        raise dataset_error(exc) from None
    warn_frame_rate(data, cfg.env)
    return data


def dataset_error(exc: Exception) -> ConfigError:
    """A dataset that cannot serve the policy, as a ``ConfigError`` naming the field: ``sft.dataset``, unless
    the message names its own (a feature-mapping error names ``sft.features.<key>``)."""
    message = str(exc)
    return ConfigError(message if message.startswith("sft.") else f"sft.dataset: {message}")


def warn_frame_rate(data: Demonstrations, env: EnvConfig) -> None:
    """Warn when the demonstrations were recorded at another rate than the env applies actions: a
    demonstrated action then lasts another time in the env than it did when recorded."""
    if data.fps is None:  # embodied's format: recorded by the env itself
        return
    env_fps = control_frequency(env)
    if env_fps is None:
        warnings.warn(f"sft.dataset: {data.path} was recorded at {data.fps:g} fps; env.id {env.id} does not say "
                      "its control frequency (metadata['render_fps']), so the two are not compared", stacklevel=2)
    elif abs(env_fps - data.fps) > 1e-6 * env_fps:
        warnings.warn(f"sft.dataset: {data.path} was recorded at {data.fps:g} fps, env.id {env.id} acts at "
                      f"{env_fps:g} Hz (its control frequency): each demonstrated action will last "
                      f"{data.fps / env_fps:g}x as long as it did in the demonstrations", stacklevel=2)


def split_by_episode(data: Demonstrations, val_fraction: float, seed: int) -> tuple[Subset, Subset]:
    """Rows of a random ``val_fraction`` of the episodes held out (whole episodes: no leakage)."""
    episodes = sorted(set(int(e) for e in data.episode_indices))
    random.Random(seed).shuffle(episodes)
    held = set(episodes[: int(round(val_fraction * len(episodes)))]) if len(episodes) > 1 else set()
    rows = np.asarray(data.episode_indices)
    val = np.flatnonzero(np.isin(rows, list(held)))
    train = np.flatnonzero(~np.isin(rows, list(held)))
    return Subset(data, train.tolist()), Subset(data, val.tolist())


def train_loader(data: Demonstrations, train_set: Subset, batch_size: int, first_step_weight: float,
                 seed: int) -> DataLoader:
    """Shuffled batches of the training rows; with ``first_step_weight != 1``, an epoch draws as
    many rows with replacement, each episode's first chunk step that many times as likely as the
    others (the step where a demonstrator commits to its target is one row of several per episode)."""
    generator = torch.Generator().manual_seed(seed)
    if first_step_weight == 1.0:
        return DataLoader(train_set, batch_size=batch_size, shuffle=True, collate_fn=collate, generator=generator)
    weights = np.where(data.steps[train_set.indices] == 0, first_step_weight, 1.0)
    sampler = WeightedRandomSampler(weights.tolist(), num_samples=len(train_set), replacement=True,
                                    generator=generator)
    return DataLoader(train_set, batch_size=batch_size, sampler=sampler, collate_fn=collate)


@torch.no_grad()
def fit_input_statistics(policy: Policy, train_set: Subset, batch_size: int) -> None:
    """Let the policy fit its statistics to the demonstrations before it learns with them (the MLP's state
    normalization, which RL then goes on updating from its own rollouts; π0's state and action mean/std)."""
    batches = DataLoader(train_set, batch_size=batch_size, collate_fn=collate)
    policy.fit_statistics((policy.forward_inputs(obs), actions, executed) for obs, actions, executed in batches)


def bc_loss(policy: Policy, obs: dict, actions: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
    """The policy's supervised loss on demonstrated chunks (``Policy.supervised_loss``): the negative
    log-likelihood averaged over executed sub-steps, or a flow-matching head's own loss."""
    return policy.supervised_loss(policy.forward_inputs(obs), actions, executed)


@torch.no_grad()
def validation_loss(policy: Policy, val_set: Subset, batch_size: int) -> float:
    total, count = 0.0, 0
    for obs, actions, executed in DataLoader(val_set, batch_size=batch_size, collate_fn=collate):
        total += float(bc_loss(policy, obs, actions, executed)) * len(actions)
        count += len(actions)
    return total / max(count, 1)


def evaluate(evaluators: dict[str, Evaluator], policy: Policy, step: int, episodes: int,
             sample: bool = False) -> dict[str, float]:
    """Success of the current weights on the fixed eval seeds, greedy or ``sample``d (``runner.eval_sample``), as
    the RL runner's ``eval/*`` metrics; with a mixture eval env, ``episodes`` on each member, pooled, and each
    member's as ``eval/<id>/*``."""
    found = {}
    for member, evaluator in evaluators.items():
        evaluator.backend.wait(evaluator.rollout_group.call("sync_weights", (step, policy.trainable_state())))
        found[member] = [e for e in evaluator.run(episodes, None, sample) if e.env_index < episodes]
    members = {k: v for m, eps in found.items() for k, v in suite_metrics(m, eps).items()} if len(found) > 1 else {}
    return eval_metrics([e for eps in found.values() for e in eps]) | members

"""Does a policy learn where the demonstrator goes first? Greedy first actions against demonstrations.

    # where an SFT checkpoint errs, by chunk step (held-out episodes of the dataset):
    python benchmarks/first_chunk_probe.py configs/pick_color_tinyvla_sft.yaml --dataset data/pick_color_home8k \
        --checkpoint runs/pick_color_tinyvla_sft-<stamp>
    # train the recipe's policy on each episode's first chunk step alone, and watch the error fall (or not):
    python benchmarks/first_chunk_probe.py configs/pick_color_tinyvla_sft.yaml --dataset data/pick_color_home \
        --train-steps 300 [--task-contains red] [policy.lr overrides ...]

In tasks like PickColor the first chunk is where the demonstrator commits to a target; the later
ones are local. A policy whose first-chunk error equals the mean predictor's has not learnt to
choose. ``--task-contains`` keeps only episodes whose instruction contains a word (one colour:
no binding of words to pixels needed), which separates "cannot localise" from "cannot bind".

Every figure is the mean absolute error of the greedy first action of a chunk (action units,
per dimension) against the demonstrated one, beside a predictor that always outputs the training
rows' mean. Episodes are split as ``embodied sft`` splits them (``sft.val_fraction``, seed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):  # run as a script: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embodied.checkpoint.store import find_checkpoint, load_checkpoint, load_policy_state  # noqa: E402
from embodied.config import Config, load_config  # noqa: E402
from embodied.core.types import MAIN_IMAGES, WRIST_IMAGES  # noqa: E402
from embodied.data import DemoDataset, collate  # noqa: E402
from embodied.data.format import Meta  # noqa: E402
from embodied.policy.base import Policy, PolicySpec, build_policy  # noqa: E402
from embodied.runs.sft import bc_loss, split_by_episode  # noqa: E402


def probe_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every dataset probe here takes: a recipe, its overrides, a dataset, a checkpoint, threads."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("config", help="recipe YAML whose policy section is probed")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. policy.flow_steps=4")
    p.add_argument("--dataset", required=True, help="folder written by `embodied collect`")
    p.add_argument("--checkpoint", help="probe this checkpoint's policy (folder or run dir); else a fresh one")
    p.add_argument("--threads", type=int, default=2)
    return p


def probed_policy(cfg: Config, data: DemoDataset, checkpoint: str | None) -> Policy:
    """The recipe's policy for the dataset's env, with the checkpoint's weights (and statistics) when given."""
    policy = build_policy(cfg.policy, spec_of(data.meta))
    if checkpoint:
        load_policy_state(policy, load_checkpoint(find_checkpoint(checkpoint))["actor"])
    return policy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = probe_parser(__doc__.split("\n")[0])
    p.add_argument("--train-steps", type=int, default=0, help="gradient steps on first chunk steps only")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--report-every", type=int, default=50)
    p.add_argument("--rows", type=int, default=300, help="rows per chunk step in the report (most)")
    p.add_argument("--task-contains", default="", help="keep only episodes whose instruction contains this")
    return p.parse_args(argv)


def spec_of(meta: Meta) -> PolicySpec:
    """What the dataset's env gave a policy at build time."""
    main, wrist = meta.image_shapes.get(MAIN_IMAGES), meta.image_shapes.get(WRIST_IMAGES)
    return PolicySpec(state_dim=meta.state_dim, image_shape=tuple(main) if main else None,
                      action_dim=meta.action_dim, action_low=tuple(meta.action_low),
                      action_high=tuple(meta.action_high), wrist_image_shape=tuple(wrist) if wrist else None)


@torch.no_grad()
def first_action_error(policy: Policy, data: DemoDataset, rows: np.ndarray) -> np.ndarray:
    """Mean |greedy first action - demonstrated first action| per action dimension over ``rows``."""
    errors = []
    for start in range(0, len(rows), 64):
        obs, actions, _ = collate([data[int(i)] for i in rows[start:start + 64]])
        greedy = policy.act(obs, deterministic=True).actions
        errors.append((greedy[:, 0] - actions[:, 0]).abs().numpy())
    return np.concatenate(errors).mean(0)


def mean_error(data: DemoDataset, fit_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    first = data.columns["actions"][:, 0]
    return np.abs(first[rows] - first[fit_rows].mean(0)).mean(0)


def fmt(values: np.ndarray) -> str:
    return " ".join(f"{v:.3f}" for v in values)


def main(argv: list[str] | None = None) -> dict[str, list]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    torch.manual_seed(cfg.experiment.seed)
    data = DemoDataset(args.dataset)
    policy = probed_policy(cfg, data, args.checkpoint)
    train_set, val_set = split_by_episode(data, cfg.sft.val_fraction, cfg.experiment.seed)
    keep = np.array([args.task_contains in t for t in data.tasks])
    train = np.asarray(train_set.indices)[keep[train_set.indices]]
    held = np.asarray(val_set.indices)[keep[val_set.indices]]
    if not len(train) or not len(held):
        raise SystemExit(f"no training or held-out rows whose instruction contains {args.task_contains!r}")
    steps = data.steps
    first_train, first_held = train[steps[train] == 0], held[steps[held] == 0][: args.rows]
    result: dict[str, list] = {"training": [], "chunk_steps": []}
    print(f"{type(policy).__name__}, {sum(p.numel() for p in policy.parameters()) / 1e6:.2f}M parameters; "
          f"{len(first_train)} training / {len(first_held)} held-out first chunk steps")
    print(f"mean predictor, first chunk step, held out: {fmt(mean_error(data, first_train, first_held))}")
    if args.train_steps:
        params = [p for p in policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
        rng, t0 = np.random.default_rng(cfg.experiment.seed), time.perf_counter()
        print(f"{'step':>6} {'loss':>7}  first-action error, train | held out (per dimension)")
        losses: list[float] = []
        for step in range(1, args.train_steps + 1):
            batch = rng.choice(first_train, args.batch_size, replace=len(first_train) < args.batch_size)
            obs, actions, executed = collate([data[int(i)] for i in batch])
            loss = bc_loss(policy, obs, actions, executed)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.sft.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            if step % args.report_every == 0 or step == args.train_steps:
                on_train = first_action_error(policy, data, first_train[: args.rows])
                on_held = first_action_error(policy, data, first_held)
                result["training"].append((step, float(np.mean(losses)), on_train, on_held))
                print(f"{step:>6} {np.mean(losses):7.3f}  {fmt(on_train)} | {fmt(on_held)}   "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
                losses = []
    print(f"\n{'chunk step':>10} {'rows':>5}  policy | mean predictor (held out, per dimension)")
    for k in range(int(steps[held].max()) + 1):
        rows = held[steps[held] == k][: args.rows]
        if not len(rows):
            break
        ours, mean = first_action_error(policy, data, rows), mean_error(data, train[steps[train] == k], rows)
        result["chunk_steps"].append((k, ours, mean))
        print(f"{k:>10} {len(rows):>5}  {fmt(ours)} | {fmt(mean)}")
    return result


if __name__ == "__main__":
    main()

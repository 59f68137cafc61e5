"""Where a recipe's training time goes, beside its envs stepped alone on the same cores, in one run.

    python benchmarks/profile_recipe.py configs/libero_object_mlp_rlpd.yaml --iterations 40
    python benchmarks/profile_recipe.py configs/reach_mlp_sac.yaml --iterations 20 cluster.backend=ray

Trains the recipe for ``--iterations`` (eval only at the end, one checkpoint at the end) and reads back, for every
iteration after the first ``--skip``, what each worker reports (``busy/<worker><rank>/<activity>``,
``embodied.core.timing``) and the loop's own timings (``time/*``). Prints each activity's share of an iteration's
wall time:

- env workers: stepping their envs (``step``: physics and the adapter), waiting for action chunks (``wait``),
  putting results on the channel (``send``), averaged over the env workers;
- rollout workers: acting (``act``), waiting for env results (``wait``: the envs stepping, plus the channel),
  sending chunks (``send``), loading new weights mid-epoch (``sync``);
- the actor: the learner's steps (``learn``), adding the epoch to replay (``replay_insert``) and sampling it
  (``replay_sample``), and the update as the driver waits for it (``time/update``);
- the driver: waiting for the rollout (``time/actor_wait`` off-policy, ``time/rollout`` on-policy) and the rest of
  the iteration (logging, the workers' reports, Ray's calls).

Then the same envs (env id, kwargs, obs mode, ``env.num_envs / cluster.num_env_workers`` a process, one process an
env worker, all at once) stepped alone with random chunks: the envs' own env steps/s on these cores, and the
recipe's training env steps/s as a ratio of it (issue 70's goal: >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("WANDB_MODE", "disabled")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ACTIVITIES = {"env": ("step", "wait", "send"), "rollout": ("act", "wait", "send", "sync"),
              "actor": ("learn", "replay_sample", "replay_insert")}


def profile_rows(rows: list[dict[str, Any]], skip: int) -> tuple[dict[str, float], float, float]:
    """The mean share of an iteration's wall time per activity over ``rows`` (metrics.jsonl rows of training
    iterations) after the first ``skip``, the mean wall seconds of an iteration, and the run's env steps/s over them."""
    train = [r for r in rows if "time/iteration" in r]
    steps_each = [r["env_steps"] - (train[i - 1]["env_steps"] if i else 0) for i, r in enumerate(train)][skip:]
    kept = train[skip:]
    if not kept:
        raise ValueError(f"no training iteration after the first {skip} to profile (got {len(rows)} rows)")
    shares: dict[str, list[float]] = {}
    for row in kept:
        wall = row["time/iteration"]
        for worker, activities in ACTIVITIES.items():
            for activity in activities:
                ranks = [v for k, v in row.items() if k.startswith(f"busy/{worker}") and k.endswith(f"/{activity}")]
                if ranks:  # averaged over the workers of the kind: each one's busy share of the iteration
                    shares.setdefault(f"{worker} {activity}", []).append(sum(ranks) / len(ranks) / wall)
        shares.setdefault("actor update (the driver's wait for it)", []).append(row.get("time/update", 0.0) / wall)
        # the off-policy loop names the driver's wait for data time/actor_wait; the on-policy one waits out the whole
        # rollout, time/rollout (the off-policy loop's time/rollout is the epoch's, which overlaps its update)
        waited = row.get("time/actor_wait", row.get("time/rollout", 0.0))
        shares.setdefault("driver waits for the rollout", []).append(waited / wall)
        rest = wall - waited - row.get("time/update", 0.0)
        shares.setdefault("driver, the rest (logging, reports, calls)", []).append(max(rest, 0.0) / wall)
    walls = [r["time/iteration"] for r in kept]
    return ({k: statistics.fmean(v) for k, v in shares.items()}, statistics.fmean(walls), sum(steps_each) / sum(walls))


def _step_alone(args: tuple[dict[str, Any], int, int, int, int, Any]) -> tuple[int, float]:
    """One process: build ``num_envs`` envs of the saved config's env section, reset, step ``chunks`` random chunks once all
    processes are built (``barrier``); the sub-steps executed and the seconds they took."""
    saved, num_envs, chunk, chunks, seed, barrier = args
    from embodied.config import config_from_dict
    from embodied.env_runtime.factory import make_vector_env

    cfg = config_from_dict(saved)
    venv = make_vector_env(cfg.env, num_envs)
    space = venv.single_action_space
    low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    rng = np.random.default_rng(seed)
    venv.reset(seed=seed)
    barrier.wait()
    t0, executed = time.perf_counter(), 0
    for _ in range(chunks):
        actions = rng.uniform(low, high, size=(num_envs, chunk, *np.shape(low))).astype(np.float32)
        executed += int(venv.chunk_step(actions).executed.sum())
    seconds = time.perf_counter() - t0
    venv.close()
    return executed, seconds


def envs_alone(saved: dict[str, Any], workers: int, num_envs: int, chunk: int, chunks: int) -> float:
    """Env steps/s of the recipe's envs stepped alone: ``workers`` processes of ``num_envs // workers`` envs each,
    stepping at the same time (as the recipe's env workers do)."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(workers)
        with ctx.Pool(workers) as pool:
            results = pool.map(_step_alone, [(saved, num_envs // workers, chunk, chunks, 1000 + w, barrier)
                                             for w in range(workers)])
    return sum(e for e, _ in results) / max(s for _, s in results)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the profile (``argv``: the command line's arguments); its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="first iterations left out (start-up, learning_starts)")
    parser.add_argument("--alone-chunks", type=int, default=100, help="chunk steps each env process runs alone")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args(argv)

    from embodied.config import load_config, to_dict
    from embodied.runs.train import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(args.recipe, [*args.overrides, f"runner.iterations={args.iterations}", "runner.eval_every=0",
                                        "runner.checkpoint_every=0", f"experiment.output_dir={tmp}",
                                        "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false"])
        t0 = time.perf_counter()
        result = train(cfg)
        total = time.perf_counter() - t0
        rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    shares, wall, run_rate = profile_rows(rows, args.skip)
    workers = cfg.cluster.num_env_workers
    alone = envs_alone(to_dict(cfg), workers, cfg.env.num_envs, cfg.policy.action_chunk, args.alone_chunks)

    print(f"\n{args.recipe}: {args.iterations} iterations in {total:.0f} s (with start-up and the final eval); "
          f"iterations {args.skip + 1}-{args.iterations}: {wall:.2f} s each")
    print("\n| activity | share of an iteration |\n|---|---|")
    for name, share in shares.items():
        print(f"| {name} | {share:.1%} |")
    print(f"\n| env steps/s | |\n|---|---|\n| training (the recipe) | {run_rate:.1f} |\n"
          f"| the envs alone ({workers} processes x {cfg.env.num_envs // workers} envs) | {alone:.1f} |\n"
          f"| training / alone | {run_rate / alone:.2f} |")
    figures = {"recipe": args.recipe, "iterations": args.iterations, "skip": args.skip, "iteration_s": wall,
               "shares": shares, "train_steps_per_s": run_rate, "alone_steps_per_s": alone, "ratio": run_rate / alone}
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()

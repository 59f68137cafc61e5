"""Env steps and training wall-clock to 90% greedy success on Reach: our SAC recipe against Stable-Baselines3's SAC.

    pip install --no-deps stable-baselines3      # not a dependency of embodied; its own needs are already here
    python benchmarks/sac_vs_sb3.py --seeds 0 1 2 --sb3-steps 30000

Both run in this one process, one after the other, on the same machine and load, and are judged the same way:
every ``--eval-every`` env steps, greedy success over ``--eval-episodes`` episodes on fixed seeds; the clock stops
while evaluating, so the wall-clock is training time only (rollouts, updates, syncs). Ours is
``configs/reach_mlp_sac.yaml`` as shipped (8 envs, chunks of 4, UTD 1); SB3's SAC keeps its defaults (one env,
one gradient step per env step, batch 256, [256, 256]) on the same ``Reach-v0`` with the same 50-step cap. A
run that never reaches the target reports its budget as a lower bound (">").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "reach_mlp_sac.yaml"
TASK = "Reach-v0"
EPISODE_STEPS = 50


@dataclass
class ToTarget:
    """Where a run first reached the target, or how far it got (``reached`` False: lower bounds)."""

    reached: bool
    env_steps: int
    seconds: float
    best: float

    def cell(self) -> str:
        mark = "" if self.reached else ">"
        return f"{mark}{self.env_steps / 1000:.1f}k steps, {mark}{self.seconds:.0f} s"


def ours(seed: int, target: float, eval_every_steps: int, episodes: int, iterations: int) -> ToTarget:
    """Our recipe; its rows in ``metrics.jsonl`` carry their wall time and the eval's own duration (``time/eval``)."""
    import embodied.runs.train as runner
    from embodied.config import load_config

    per_iteration = 8 * 8 * 4  # envs x chunk steps x chunk, as in the recipe
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(str(RECIPE), [
            f"experiment.seed={seed}", f"runner.iterations={iterations}",
            f"runner.eval_every={max(1, eval_every_steps // per_iteration)}", f"runner.eval_episodes={episodes}",
            "runner.checkpoint_every=0", "logger.backends=[]", "runner.plot=false", f"experiment.output_dir={out}",
        ])
        run_dir = runner.train(cfg).run_dir
        start = (run_dir / "config.yaml").stat().st_mtime  # written as the run dir is made
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    eval_seconds, best = 0.0, 0.0
    for row in rows:
        success = row.get("eval/success_rate", float("nan"))
        if np.isnan(success):
            continue
        eval_seconds += row["time/eval"]
        best = max(best, success)
        if success >= target:
            return ToTarget(True, int(row["env_steps"]), row["time"] - start - eval_seconds, best)
    last = rows[-1]
    return ToTarget(False, int(last["env_steps"]), last["time"] - start - eval_seconds, best)


def sb3(seed: int, target: float, eval_every_steps: int, episodes: int, budget_steps: int) -> ToTarget:
    """Stable-Baselines3's SAC with its defaults on one ``Reach-v0`` (its dict observation flattened)."""
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    from embodied.core.registry import ENVS

    def make() -> gym.Env:
        env = ENVS.resolve(TASK)(obs_mode="state", max_episode_steps=EPISODE_STEPS)
        return gym.wrappers.FlattenObservation(env)

    eval_env = make()

    def success_rate(model: SAC) -> float:
        wins = 0
        for episode in range(episodes):
            obs, _ = eval_env.reset(seed=10_000 + episode)  # the same fixed seeds at every eval
            for _ in range(EPISODE_STEPS):
                action, _ = model.predict(obs, deterministic=True)
                obs, _, terminated, truncated, info = eval_env.step(action)
                if terminated or truncated:
                    break
            wins += bool(info.get("success"))
        return wins / episodes

    class Judge(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.clock, self.paused, self.best, self.hit = time.perf_counter(), 0.0, 0.0, None

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every_steps:
                return True
            t0 = time.perf_counter()
            rate = success_rate(self.model)
            self.paused += time.perf_counter() - t0
            self.best = max(self.best, rate)
            print(f"  sb3 seed {seed}: {self.num_timesteps} steps, {self.seconds():.0f} s: {rate:.1%}", flush=True)
            if rate >= target:
                self.hit = self.num_timesteps
            return self.hit is None

        def seconds(self) -> float:
            return time.perf_counter() - self.clock - self.paused

    judge = Judge()
    model = SAC("MlpPolicy", make(), seed=seed, verbose=0)
    model.learn(total_timesteps=budget_steps, callback=judge)
    return ToTarget(judge.hit is not None, judge.hit or model.num_timesteps, judge.seconds(), judge.best)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--eval-every", type=int, default=1280, help="env steps between greedy evals (both)")
    parser.add_argument("--eval-episodes", type=int, default=128)
    parser.add_argument("--ours-iterations", type=int, default=60, help="the recipe's budget (256 env steps each)")
    parser.add_argument("--sb3-steps", type=int, default=30_000, help="SB3's budget in env steps")
    parser.add_argument("--sb3-seeds", type=int, nargs="+", default=None, help="default: --seeds")
    args = parser.parse_args()
    try:
        import stable_baselines3
    except ImportError:
        raise SystemExit("this benchmark needs Stable-Baselines3: pip install --no-deps stable-baselines3") from None
    import torch

    torch.set_num_threads(2)
    print(f"Reach-v0, greedy success >= {args.target:.0%} on {args.eval_episodes} fixed-seed episodes, every "
          f"{args.eval_every} env steps; wall-clock without eval time; SB3 {stable_baselines3.__version__}")
    rows = []
    for seed in args.seeds:
        mine = ours(seed, args.target, args.eval_every, args.eval_episodes, args.ours_iterations)
        print(f"  ours seed {seed}: {mine.cell()} (best {mine.best:.1%})", flush=True)
        theirs = None
        if seed in (args.sb3_seeds if args.sb3_seeds is not None else args.seeds):
            theirs = sb3(seed, args.target, args.eval_every, args.eval_episodes, args.sb3_steps)
        rows.append((seed, mine, theirs))
    print("\n| seed | ours (reach_mlp_sac.yaml) | SB3 SAC, defaults | wall-clock ratio ours/SB3 |")
    print("|---|---|---|---|")
    for seed, mine, theirs in rows:
        if theirs is None:
            print(f"| {seed} | {mine.cell()} | not run | |")
            continue
        bound = "" if theirs.reached else "<"  # SB3's time is a lower bound, so the ratio an upper one
        ratio = f"{bound}{mine.seconds / theirs.seconds:.2f}x" if mine.reached else "ours missed the target"
        print(f"| {seed} | {mine.cell()} | {theirs.cell()} (best {theirs.best:.1%}) | {ratio} |")


if __name__ == "__main__":
    main()

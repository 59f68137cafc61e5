"""Eval throughput on LIBERO (and LIBERO-PRO) against the number of env workers, and what the protocols cost.

    MUJOCO_GL=egl python benchmarks/libero_pro_eval.py                                   # untrained MLP, state obs
    MUJOCO_GL=egl python benchmarks/libero_pro_eval.py --checkpoint RUN/checkpoints/iter_000075 --config RUN/config.yaml
    MUJOCO_GL=egl python benchmarks/libero_pro_eval.py --workers 1 2 4 --episodes 8 --suite LIBERO-Object-Swap-v0

For each number of env workers E (Ray, one process each, ``--envs-per-worker`` eval envs each), an ``Evaluator``
is started (its env workers build their LIBERO envs: the build time) and runs ``--episodes`` greedy episodes of the
suite's fixed eval set (the episode time). Printed per E: episodes/s, env steps/s, the share of the wall time spent
building envs, and the projections: the four-suite protocol (4 suites x 10 tasks x 50 states = 2,000 episodes) and
LIBERO-PRO's Object suite (every Object perturbation the installed package runs, 500 episodes each) on a 32-CPU
node, from the measured per-worker rate scaled to 32 env workers and one build per worker per scene (task).

An untrained policy runs every episode to the cap (280 steps on Object): the slowest case. A trained one ends
earlier. On a shared machine the figures are indicative: the script prints the load average it ran under.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NODE_CPUS = 32
PROTOCOL_EPISODES = 2000  # 4 suites x 10 tasks x 50 init states (vla-eval's anchor: 18 min on one H100 node)
SCENES_PER_SUITE = 10  # one scene (task) each; a worker builds each scene it visits once


def measure(cfg: object, state: dict | None, episodes: int) -> dict[str, float]:
    """Build time, run time and steps of one eval of ``episodes`` episodes on ``cfg``'s eval env."""
    from embodied.backends import make_backend
    from embodied.workers.evaluator import Evaluator

    backend = make_backend(cfg.cluster)
    try:
        t0 = time.perf_counter()
        evaluator = Evaluator.start(cfg, backend)
        build = time.perf_counter() - t0
        if state is not None:
            evaluator.load_checkpoint(state["actor"], int(state["actor"].get("version", 0)))
        t1 = time.perf_counter()
        found = [e for e in evaluator.run(episodes) if e.env_index < episodes]
        run = time.perf_counter() - t1
        evaluator.close()
    finally:
        backend.shutdown()
    steps = sum(e.length for e in found)
    return {"episodes": len(found), "steps": steps, "build_s": build, "run_s": run,
            "success": sum(e.success_once for e in found) / max(len(found), 1)}


def project(row: dict[str, float], build_s: float, workers: int, episodes: int, scenes: int) -> float:
    """Seconds for ``episodes`` over ``workers`` env workers at ``row``'s per-worker rate, each worker building the
    ``ceil(scenes / workers)`` scenes (tasks) it visits in turn (eval plans give each env contiguous episodes) in
    ``build_s`` each (the quickest start of eval workers measured, Ray actors included)."""
    per_worker_rate = row["episodes"] / row["run_s"] / row["workers"]
    return episodes / (per_worker_rate * workers) + build_s * math.ceil(scenes / workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/libero_object_mlp_sft.yaml")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint to evaluate (default: the untrained policy)")
    parser.add_argument("--suite", default="LIBERO-Object-v0")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--envs-per-worker", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=8, help="per setting, spread over task 0's 50 init states")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--rows", default=None, help="print the table and projections of a JSON written by --out")
    args = parser.parse_args()

    from embodied.checkpoint.store import load_checkpoint
    from embodied.config import load_config
    from embodied.envs.adapters.libero import pro

    state = load_checkpoint(Path(args.checkpoint)) if args.checkpoint else None
    rows = json.loads(Path(args.rows).read_text())["rows"] if args.rows else []
    for workers in [] if args.rows else args.workers:
        envs = workers * args.envs_per_worker
        cfg = load_config(args.config, [
            "cluster.backend=ray", f"cluster.num_env_workers={workers}", f"eval_env.num_envs={envs}",
            f"env.num_envs={max(envs, 2)}", f"eval_env.id={args.suite}", "logger.progress_bar=false",
            "env.kwargs={task_ids: [0]}", "env.max_episode_steps=280"])
        try:
            row = {"workers": workers, "envs": envs, **measure(cfg, state, args.episodes)}
        except Exception as exc:  # noqa: BLE001 - e.g. not enough memory for E envs: the other rows still count
            print(f"E={workers}: not measured: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        row["episodes_per_s"] = row["episodes"] / row["run_s"]
        row["steps_per_s"] = row["steps"] / row["run_s"]
        row["build_share"] = row["build_s"] / (row["build_s"] + row["run_s"])
        row["load_average"] = os.getloadavg()[0]
        rows.append(row)
        print(f"E={workers}: {row['episodes']} episodes ({row['steps']} steps) in {row['run_s']:.1f} s "
              f"+ build {row['build_s']:.1f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.out:  # each row as it comes (a long run on a shared machine may be cut short)
            Path(args.out).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    if not rows:
        sys.exit("no setting could be measured")
    pro_suites = [i for i in pro.PRO_OBJECT if not pro.runnable(i)]
    load = os.getloadavg()
    print(f"\nLIBERO eval throughput, {args.suite} task 0, {'checkpoint ' + args.checkpoint if state else 'policy'} "
          f"(untrained unless named), Ray, {os.cpu_count()} CPUs shared with others: the load average column says "
          f"how shared; the figures are indicative")
    print(f"{'E':>3} {'envs':>5} {'episodes/s':>11} {'steps/s':>8} {'build s':>8} {'build share':>12} {'success':>8} "
          f"{'load':>5}")
    for r in rows:
        print(f"{r['workers']:>3} {r['envs']:>5} {r['episodes_per_s']:>11.3f} {r['steps_per_s']:>8.1f} "
              f"{r['build_s']:>8.1f} {r['build_share']:>11.1%} {r['success']:>8.2f} {r.get('load_average', float('nan')):>5.1f}")
    best = max(rows, key=lambda r: r["episodes_per_s"] / r["workers"])
    build = min(r["build_s"] for r in rows)
    full = project(best, build, NODE_CPUS, PROTOCOL_EPISODES, SCENES_PER_SUITE * 4)
    object_pro = project(best, build, NODE_CPUS, 500 * len(pro_suites), SCENES_PER_SUITE * len(pro_suites))
    print(f"\nprojected on a {NODE_CPUS}-CPU node ({NODE_CPUS} env workers at E={best['workers']}'s per-worker rate, "
          f"one build of {build:.0f} s per worker per scene):")
    print(f"  four-suite protocol, {PROTOCOL_EPISODES} episodes: {full / 60:.1f} min (vla-eval: 18 min on one H100 node)")
    print(f"  LIBERO-PRO Object, {len(pro_suites)} suites x 500 = {500 * len(pro_suites)} episodes: "
          f"{object_pro / 60:.1f} min")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "load_average": load, "projection_min": {
            "protocol_2000": full / 60, "libero_pro_object": object_pro / 60}}, indent=2) + "\n")


if __name__ == "__main__":
    main()

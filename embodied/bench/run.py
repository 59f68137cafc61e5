"""``embodied bench``: the distributed-rollout figures in one run, as a table, JSON and a PNG.

    embodied bench                 # the full matrix (~10 min on 2 cores)
    embodied bench --quick         # a smoke run of every section at toy sizes (CI)

Sections (each row says what it measured; nothing here is asserted):

- **throughput**: env steps/s of the framework's rollout path (random policy, so the engine and
  not a model is timed) against raw gymnasium ``SyncVectorEnv`` / ``AsyncVectorEnv`` on Reach-v0,
  state and rgb observations, local and Ray, E env workers, N envs, with memory;
- **pipelining**: rgb observations with the CNN and the tiny VLA, rollout with 1 and 2 pipeline
  stages, beside the ideal speed-up (e + p) / max(e, p) from the env's and the policy's own times;
- **weight sync**: ``Workers.sync_weights`` on Ray against the policy's size, as a share of an
  iteration (MLP default recipe; tiny VLA with and without LoRA);
- **SAC** (``embodied.bench.sac``): gradient updates/s at batch 256 with an ensemble of 10 LayerNorm critics
  on the Reach MLP, and the shares of the off-policy loop's time (overlapped, the recipe's default) in which the
  actor waits for data and the rollouts wait for weights (from the loop's ``time/actor_wait``,
  ``time/rollout_wait``);
- **time to 90%**: the default recipe from the command to the first eval at >= 90% success,
  start-up included, and the env steps it took.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embodied.bench.sac import sac_row
from embodied.bench.throughput import TASK, Rate, framework_rate, native_rate, raw_rate
from embodied.core.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = ROOT / "configs" / "reach_mlp_ppo.yaml"
TINY_VLA_RECIPE = ROOT / "configs" / "pick_color_tinyvla_ppo.yaml"


@dataclass
class Sizes:
    """How much each section runs."""

    state_envs: tuple[int, ...]
    rgb_envs: tuple[int, ...]
    env_workers: tuple[int, ...]
    steps: int  # env steps timed per state row (rgb rows: a tenth)
    other_tasks: tuple[str, ...]  # state rows of these tasks too, at 32 envs, local and Ray E=1
    async_max_envs: int  # AsyncVectorEnv makes a process per env
    pipeline_envs: int
    vla: bool
    time_to_target: bool
    sac: tuple[int, int, int, int]  # SAC row: updates timed, loop iterations timed, envs, chunk steps

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            return cls((8,), (4,), (1,), 400, (), 4, 4, False, False, (8, 2, 4, 2))
        return cls((8, 32, 128, 256), (8, 32), (1, 2, 4), 20_000, other_builtin_tasks(2), 32, 16, True, True,
                   (200, 4, 8, 8))


def other_builtin_tasks(count: int) -> tuple[str, ...]:
    """The first ``count`` built-in tasks after the default one, in the registry's order (the env catalog's family
    of built-in tasks): the bench names none itself."""
    from embodied.core.registry import ENVS
    from embodied.env_runtime.catalog import FAMILIES, EnvDescription

    builtin = FAMILIES[-1][1]
    ids = [name for name in ENVS.names(declared_order=True)
           if EnvDescription(name, ENVS.entry_point(name), [], "").family == builtin and name != TASK]
    return tuple(ids[:count])


@dataclass
class Report:
    throughput: list[dict[str, Any]] = field(default_factory=list)
    pipelining: list[dict[str, Any]] = field(default_factory=list)
    weight_sync: list[dict[str, Any]] = field(default_factory=list)
    sac: list[dict[str, Any]] = field(default_factory=list)
    time_to_target: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)


def bench(quick: bool, out: Path, chunk: int = 8) -> Report:
    """Run every section; write ``bench.json``, ``bench.md`` and ``bench.png`` into ``out``."""
    import torch

    sizes = Sizes.of(quick)
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(machine={"cpus": os.cpu_count(), "python": sys.version.split()[0], "torch": torch.__version__,
                             "quick": quick, "task": TASK, "chunk": chunk})
    started = _start_ray()
    try:
        throughput(report, sizes, chunk)
        pipelining(report, sizes)
        weight_sync(report, sizes)
    finally:
        if started:
            import ray

            ray.shutdown()
    report.sac.append(sac_row(*sizes.sac))
    if sizes.time_to_target:
        time_to_target(report)
    write(report, out)
    return report


def _start_ray() -> bool:
    """One Ray for every Ray row (``RayBackend`` joins a running Ray and leaves it up); whether it started one."""
    import ray

    if ray.is_initialized():
        return False
    env = {"env_vars": {k: os.environ[k] for k in ("MUJOCO_GL", "WANDB_MODE") if k in os.environ}}
    ray.init(address="local", include_dashboard=False, log_to_driver=False, runtime_env=env)
    return True


def _row(rate: Rate, obs: str, backend: str, env_workers: int, num_envs: int, raw: float,
         native: Rate | None = None, task: str = TASK) -> dict[str, Any]:
    """One path's figures; ``vs_raw_physics`` divides by the native physics limit of the same worlds and steps,
    measured in the same run (state rows of tasks that offer one)."""
    return {"task": task, "path": rate.name, "obs": obs, "backend": backend, "env_workers": env_workers,
            "num_envs": num_envs, "env_steps": rate.env_steps, "seconds": round(rate.seconds, 4),
            "steps_per_s": round(rate.steps_per_s, 1), "vs_raw_sync": round(rate.steps_per_s / raw, 3),
            "vs_raw_physics": round(rate.steps_per_s / native.steps_per_s, 3) if native else None,
            "memory_mib": round(rate.memory_mib, 1)}


def throughput(report: Report, sizes: Sizes, chunk: int) -> None:
    from tqdm import tqdm

    jobs = [(TASK, obs, n, sizes.env_workers) for obs, ns in (("state", sizes.state_envs), ("rgb", sizes.rgb_envs))
            for n in ns] + [(task, "state", 32, (1,)) for task in sizes.other_tasks]
    for task, obs, n, env_workers in tqdm(jobs, desc="throughput", unit="config", dynamic_ncols=True):
        steps = sizes.steps if obs == "state" else max(sizes.steps // 10, 4 * n * chunk)
        chunk_steps = max(1, min(16, math.ceil(steps / (n * chunk))))
        native = native_rate(n, chunk, steps, task) if obs == "state" else None
        raw = raw_rate(n, steps, 50, 0, obs, "sync", task)
        rows = [_row(raw, obs, "-", 0, n, raw.steps_per_s, native, task)]
        if native is not None:
            rows.append(_row(native, obs, "-", 0, n, raw.steps_per_s, native, task))
        if n <= sizes.async_max_envs and task == TASK:
            rows.append(_row(raw_rate(n, steps, 50, 0, obs, "async"), obs, "-", 0, n, raw.steps_per_s, native))
        rows.append(_row(framework_rate(n, chunk, steps, "local", chunk_steps, 50, 0, obs_mode=obs, task=task), obs,
                         "local", 1, n, raw.steps_per_s, native, task))
        for e in (e for e in env_workers if e <= n):
            rate = framework_rate(n, chunk, steps, "ray", chunk_steps, 50, 0, obs_mode=obs, env_workers=e, task=task)
            rows.append(_row(rate, obs, "ray", e, n, raw.steps_per_s, native, task))
        report.throughput += rows


def pipelining(report: Report, sizes: Sizes) -> None:
    """rgb observations: rollout with 1 and 2 stages beside the ideal from the env's and the policy's own
    times, for the CNN (a cheap policy: little to gain) and the tiny VLA (costs comparable to the env's)."""
    cases = [("CNN", ["policy.type=cnn", "policy.action_chunk=4"])]
    if sizes.vla:
        cases.append(("tiny VLA", ["policy.type=vla", "policy.model_path=tiny:smolvlm-tiny", "policy.action_chunk=4"]))
    for name, overrides in cases:
        report.pipelining.append(_pipeline_case(name, overrides, sizes))


def _pipeline_case(name: str, overrides: list[str], sizes: Sizes) -> dict[str, Any]:
    """The policy and the env as a run's config builds them (registry lookups: the bench names neither)."""
    import numpy as np
    import torch

    from embodied.config import load_config
    from embodied.env_runtime.factory import env_spec, make_vector_env
    from embodied.policy.base import build_policy

    n, chunk, steps = sizes.pipeline_envs, 4, sizes.pipeline_envs * 4 * (4 if sizes.steps < 1000 else 16)
    cfg = load_config(None, [f"env.id={TASK}", "env.obs_mode=rgb", "env.max_episode_steps=50",
                             "env.vectorization=per_env", *overrides])
    venv = make_vector_env(cfg.env, n)
    try:
        obs = venv.reset(seed=0)
        spec = env_spec(cfg.env)
        policy = build_policy(cfg.policy, spec)
        actions = np.zeros((n, chunk, spec.action_dim), dtype=np.float32)
        env_s, policy_s = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            venv.chunk_step(actions)
            env_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with torch.no_grad():
                policy.act(obs)
            policy_s.append(time.perf_counter() - t0)
    finally:
        venv.close()
    e, p = statistics.median(env_s), statistics.median(policy_s)
    one = framework_rate(n, chunk, steps, "local", 4, 50, 0, 1, "rgb", extra=overrides)
    two = framework_rate(n, chunk, steps, "local", 4, 50, 0, 2, "rgb", extra=overrides)
    ideal = (e + p) / max(e, p)
    measured = two.steps_per_s / one.steps_per_s
    return {"policy": name, "num_envs": n, "env_s_per_chunk_step": round(e, 5), "policy_s_per_chunk_step": round(p, 5),
            "steps_per_s_1_stage": round(one.steps_per_s, 1), "steps_per_s_2_stages": round(two.steps_per_s, 1),
            "speedup": round(measured, 3), "ideal_speedup": round(ideal, 3),
            "share_of_ideal": round((measured - 1) / (ideal - 1), 3) if ideal > 1.05 else None}  # else: nothing to gain


def weight_sync(report: Report, sizes: Sizes) -> None:
    """Median ``sync_weights`` time on Ray beside the median iteration of the same config."""
    cases = [("MLP (default recipe)", DEFAULT_RECIPE, [f"env.num_envs={8 if sizes.steps < 1000 else 32}"])]
    if sizes.vla:
        small = ["env.num_envs=8", "eval_env.num_envs=1", "rollout.chunk_steps=8", "algorithm.num_minibatches=2",
                 "algorithm.update_epochs=1", "env.preflight=false"]
        cases += [("tiny VLA, full", TINY_VLA_RECIPE, [*small, "policy.lora_rank=0"]),
                  ("tiny VLA, LoRA rank 4", TINY_VLA_RECIPE, [*small, "policy.lora_rank=4"])]
    for name, recipe, extra in cases:
        report.weight_sync.append(_sync_case(name, recipe, extra, iterations=2 if sizes.steps < 1000 else 3))


def _sync_case(name: str, recipe: Path, extra: list[str], iterations: int) -> dict[str, Any]:
    from embodied.config import load_config
    from embodied.backends import make_backend, user_packages
    from embodied.runs.train import train_iteration
    from embodied.workers.group import Workers

    cfg = load_config(recipe, [*extra, "cluster.backend=ray", "logger.backends=[console]", "env.preflight=false"])
    backend = make_backend(cfg.cluster, user_packages(cfg))
    try:
        workers = Workers.start(cfg, backend)
        try:
            iteration_s = []
            for it in range(1, iterations + 1):
                t0 = time.perf_counter()
                train_iteration(workers, cfg, it)
                iteration_s.append(time.perf_counter() - t0)
            sync_s = []
            for _ in range(5):
                t0 = time.perf_counter()
                workers.sync_weights()
                sync_s.append(time.perf_counter() - t0)
            _, weights = backend.wait(workers.actor_group.call("weights", False))[0]
            sent = sum(t.numel() * t.element_size() for t in weights.values())
        finally:
            workers.close()
    finally:
        backend.shutdown()
    it_s, s_s = statistics.median(iteration_s), statistics.median(sync_s)
    return {"policy": name, "bytes_sent": sent, "sync_s": round(s_s, 5), "iteration_s": round(it_s, 4),
            "share_of_iteration": round(s_s / it_s, 4)}


def time_to_target(report: Report, target: float = 0.9) -> None:
    """The default recipe from the command to the first eval >= ``target``, start-up included."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        run = subprocess.run([sys.executable, "-m", "embodied.cli", "train", str(DEFAULT_RECIPE), "runner.eval_every=5",
                              "runner.eval_video=none", "logger.backends=[console]", "logger.progress_bar=false",
                              f"experiment.output_dir={tmp}"], capture_output=True, text=True, cwd=ROOT)
        wall = time.time() - t0
        if run.returncode != 0:
            raise RuntimeError(f"the default recipe failed:\n{run.stderr[-2000:]}")
        rows = [json.loads(line) for line in next(Path(tmp).glob("*/metrics.jsonl")).read_text().splitlines()]
    hit = next((r for r in rows if r.get("eval/success_rate", 0.0) >= target), None)
    report.time_to_target.append({
        "recipe": DEFAULT_RECIPE.name, "target": target, "reached": hit is not None,
        "seconds_to_target": round(hit["time"] - t0, 2) if hit else None,
        "env_steps_to_target": int(hit["env_steps"]) if hit else None,
        "iteration": int(hit["step"]) if hit else None, "whole_run_s": round(wall, 2)})


# -- output --------------------------------------------------------------------------------------


def markdown(report: Report) -> str:
    """The report as markdown tables."""
    parts = [f"# embodied bench ({'quick' if report.machine.get('quick') else 'full'}; "
             f"{report.machine.get('cpus')} CPUs, torch {report.machine.get('torch')})\n"]
    for title, rows in (("Rollout throughput (random policy)", report.throughput),
                        ("Pipelining (rgb, local)", report.pipelining),
                        ("Weight sync (Ray)", report.weight_sync),
                        ("SAC: updates/s and who waits (Reach MLP, local)", report.sac),
                        ("Default recipe: time to 90% eval success", report.time_to_target)):
        if not rows:
            continue
        keys = list(rows[0])
        parts.append(f"## {title}\n\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n" +
                     "\n".join("| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows) + "\n")
    return "\n".join(parts)


def write(report: Report, out: Path) -> None:
    with atomic_path(out / "bench.json") as tmp:
        tmp.write_text(json.dumps(asdict(report), indent=2))
    with atomic_path(out / "bench.md") as tmp:
        tmp.write_text(markdown(report))
    draw(report, out / "bench.png")


def draw(report: Report, path: Path) -> None:
    """Four panels: state and rgb throughput against N per path, pipelining, weight-sync share."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 9), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    for ax, obs in zip(axes[0], ("state", "rgb")):
        rows = [r for r in report.throughput if r["obs"] == obs and r.get("task", TASK) == TASK]
        for name in dict.fromkeys(r["path"] for r in rows):
            pts = sorted((r["num_envs"], r["steps_per_s"]) for r in rows if r["path"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set(title=f"{TASK}, {obs} obs: env steps/s", xlabel="envs (N)", ylabel="env steps/s")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    ax = axes[1][0]
    for i, r in enumerate(report.pipelining):
        ax.bar([i - 0.2, i + 0.2], [r["speedup"], r["ideal_speedup"]], width=0.4, color=["C0", "C7"])
    ax.set_xticks(range(len(report.pipelining)), [r["policy"] for r in report.pipelining])
    ax.set(title="pipelining (2 stages / 1): measured (blue), ideal (grey)", ylabel="speed-up")
    ax = axes[1][1]
    names = [r["policy"] for r in report.weight_sync]
    ax.barh(names, [100 * r["share_of_iteration"] for r in report.weight_sync])
    ax.set(title="weight sync, % of an iteration (Ray)", xlabel="%")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")

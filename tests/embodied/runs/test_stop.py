"""SIGINT / SIGTERM stop a run after the current iteration, with a final checkpoint it resumes from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embodied.checkpoint.store import find_checkpoint, load_checkpoint

ROOT = Path(__file__).resolve().parents[3]
TOY = ["env.id=tests.toy_envs:CountingEnv", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
       "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=1",
       "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=0", "logger.backends=[console]",
       "logger.progress_bar=false", "runner.plot=false", "env.preflight=false"]


def start_run(tmp_path: Path, iterations: int = 100_000) -> tuple[subprocess.Popen, Path]:
    cmd = [sys.executable, "-m", "embodied.cli", "train", "configs/reach_mlp_ppo.yaml", *TOY,
           f"runner.iterations={iterations}", f"experiment.output_dir={tmp_path}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": "disabled"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the run has logged a few iterations
        runs = list(tmp_path.glob("*/metrics.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= 3:
            return proc, runs[0].parent
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the run did not start: {proc.communicate()[1][-2000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_finishes_the_iteration_writes_a_checkpoint_and_says_so(tmp_path, sig, code):
    proc, run_dir = start_run(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in err and "runner.resume_from=" in err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    checkpoint = find_checkpoint(run_dir)
    assert load_checkpoint(checkpoint)["iteration"] == rows[-1]["step"]  # nothing trained after the checkpoint
    assert not list(run_dir.rglob("*.tmp*"))


@pytest.mark.slow
def test_a_stopped_run_resumes_where_it_stopped(tmp_path):
    proc, run_dir = start_run(tmp_path)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    stopped = load_checkpoint(find_checkpoint(run_dir))["iteration"]
    resumed = subprocess.run([sys.executable, "-m", "embodied.cli", "train", "configs/reach_mlp_ppo.yaml", *TOY,
                              f"runner.iterations={stopped + 2}", f"runner.resume_from={run_dir}",
                              f"experiment.output_dir={tmp_path}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "WANDB_MODE": "disabled"})
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, stopped + 3))

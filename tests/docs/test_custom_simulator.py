"""docs/custom_simulator.md stays true: its code is the example's code, and the commands work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "custom_simulator.md"
EXAMPLES = ROOT / "docs" / "examples"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES), "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "embodied.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_doc_shows_the_example_files_verbatim():
    text = DOC.read_text()
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", text, flags=re.S)
    assert (EXAMPLES / "my_sim" / "point_reach.py").read_text() in blocks
    assert (EXAMPLES / "point_reach.yaml").read_text() in blocks


def test_check_env_passes_on_the_example():
    proc = run("check-env", "my_sim.point_reach:PointReachEnv", "--steps", "200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed" in proc.stdout


@pytest.mark.slow
def test_train_on_the_example(tmp_path):
    proc = run("train", "docs/examples/point_reach.yaml", "runner.iterations=4", "runner.eval_every=0",
               "logger.progress_bar=false", f"experiment.output_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final eval: success_rate=" in proc.stdout


def test_a_misspelt_kwarg_is_named_before_training(tmp_path):
    proc = run("train", "docs/examples/point_reach.yaml", "env.kwargs.speeed=0.2", f"experiment.output_dir={tmp_path}")
    assert proc.returncode == 2
    assert "env.kwargs.speeed" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir()), "a run directory was made for a run that never started"

"""docs/custom_simulator.md stays true: its code is the examples' code, and its commands work."""

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
FILES = ["my_sim/plain_point.py", "plain_point.yaml", "my_sim/color_reach.py", "color_reach_vla.yaml",
         "my_sim/point_batch.py", "point_batch.yaml"]
SHORT = ["runner.iterations=2", "runner.eval_every=0", "runner.eval_episodes=4", "eval_env.num_envs=4",
         "logger.progress_bar=false", "runner.plot=false"]


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES), "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "embodied.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_doc_shows_the_example_files_verbatim():
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", DOC.read_text(), flags=re.S)
    for name in FILES:
        assert (EXAMPLES / name).read_text() in blocks, name


def test_every_command_of_the_doc_is_tested_here():
    commands = re.findall(r"^embodied (\S+) (\S+)", DOC.read_text(), flags=re.M)
    assert sorted(set(commands)) == sorted({
        ("check-env", "my_sim.plain_point:PlainPointEnv"), ("check-env", "my_sim.color_reach:ColorReachEnv"),
        ("check-env", "my_sim.point_batch:PointBatchEnv"), ("train", "docs/examples/plain_point.yaml"),
        ("train", "docs/examples/color_reach_vla.yaml"), ("train", "docs/examples/point_batch.yaml")})


@pytest.mark.parametrize("env_id,extra", [("my_sim.plain_point:PlainPointEnv", []),
                                          ("my_sim.color_reach:ColorReachEnv", ["--obs-mode", "rgb"]),
                                          ("my_sim.point_batch:PointBatchEnv", [])])
def test_check_env_passes_on_each_example(env_id, extra):
    proc = run("check-env", env_id, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["plain_point", "color_reach_vla", "point_batch"])
def test_train_on_each_example(tmp_path, recipe):
    extra = ["runner.eval_video=last"] if recipe == "point_batch" else []
    proc = run("train", f"docs/examples/{recipe}.yaml", *SHORT, *extra, f"experiment.output_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final eval: success_rate=" in proc.stdout
    if extra:
        assert list(tmp_path.glob("*/videos/*/episode_000.mp4"))


def test_a_misspelt_kwarg_is_named_before_training(tmp_path):
    proc = run("train", "docs/examples/plain_point.yaml", "env.kwargs.speeed=0.2", f"experiment.output_dir={tmp_path}")
    assert proc.returncode == 2
    assert "env.kwargs.speeed" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir()), "a run directory was made for a run that never started"

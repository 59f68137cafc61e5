"""`embodied eval` on a trained Reach checkpoint: the same numbers twice, a table, eval.json and videos."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied.cli import main
from embodied.config import load_config
from embodied.runs.train import train
from embodied.workers.launch import EVAL_SEED_OFFSET

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "reach_mlp_ppo.yaml"
SHORT = ["runner.iterations=3", "env.num_envs=8", "eval_env.num_envs=4", "runner.eval_episodes=4",
         "rollout.chunk_steps=8", "runner.eval_every=0", "logger.progress_bar=false", "logger.backends=[console]"]
EVAL = ["eval_env.max_episode_steps=20", "logger.video.size=96", "logger.video.max_videos=3"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={out}"])).run_dir


def decode(path: Path):
    from tests.embodied.logging.test_video import decode as decode_mp4

    return decode_mp4(path)


@pytest.mark.slow
def test_eval_gives_the_same_numbers_twice_with_a_table_json_and_videos(run_dir, capsys):
    args = ["eval", str(RECIPE), *EVAL, "--checkpoint", str(run_dir), "--episodes", "6"]
    assert main([*args, "--video"]) == 0
    out = capsys.readouterr().out
    default_out = run_dir / "eval" / "iter_000003"
    report = json.loads((default_out / "eval.json").read_text())
    assert "success" in out and "95% CI" in out and f"seeds {EVAL_SEED_OFFSET}..{EVAL_SEED_OFFSET + 5}" in out
    assert str(default_out / "eval.json") in out and "videos: 4 mp4" in out
    assert report["iteration"] == 3 and report["deterministic"] is True and report["num_episodes"] == 6
    assert report["checkpoint"].endswith("iter_000003")
    assert [e["seed"] for e in report["episodes"]] == [EVAL_SEED_OFFSET + k for k in range(6)]
    assert set(report) >= {"success_rate", "success_ci95", "return_mean", "episode_len", "per_task", "videos"}

    assert main([*args, "--out", str(run_dir / "again")]) == 0
    again = json.loads((run_dir / "again" / "eval.json").read_text())
    for key in ("success_rate", "success_ci95", "return_mean", "return_std", "episode_len", "episodes"):
        assert again[key] == report[key], key
    assert again["videos"] == []

    lengths = [e["length"] for e in report["episodes"]]
    for k in range(3):
        video = decode(default_out / "videos" / f"episode_{k:03d}.mp4")
        assert video.shape == (lengths[k] + 1, 96, 96, 3)  # reset frame, then every sub-step to the terminal one
        assert video.mean() > 30 and video.std() > 10
    grid = decode(default_out / "videos" / "grid_000-002.mp4")
    assert grid.shape == (max(lengths[:3]) + 1, 192, 192, 3)


@pytest.mark.slow
def test_eval_console_script_and_its_errors(run_dir):
    exe = Path(sys.executable).parent / "embodied"
    cmd = [str(exe) if exe.exists() else "embodied", "eval", str(RECIPE), *EVAL, "--checkpoint",
           str(run_dir / "checkpoints" / "iter_000003"), "--episodes", "2", "--out", str(run_dir / "cli")]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all" in proc.stdout and (run_dir / "cli" / "eval.json").exists()
    missing = subprocess.run([*cmd[:3], "--checkpoint", str(run_dir / "nope.pt")], capture_output=True, text=True,
                             timeout=600, env=env)
    assert missing.returncode == 2 and "nope.pt" in missing.stderr

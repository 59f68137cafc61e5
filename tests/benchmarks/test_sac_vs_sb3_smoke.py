"""The SAC-against-SB3 benchmark: our side runs and is judged from its metrics; without SB3 it says how to get it."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.sac_vs_sb3 import ours


def test_our_side_reports_env_steps_and_training_seconds_without_eval_time(tmp_path):
    result = ours(seed=0, target=1.01, eval_every_steps=256, episodes=2, iterations=2)  # a target nobody reaches
    assert not result.reached and 0 < result.env_steps <= 2 * 256  # executed sub-steps: episodes end mid-chunk
    assert 0 < result.seconds and 0.0 <= result.best <= 1.0
    assert result.cell().startswith(f">{result.env_steps / 1000:.1f}k steps, >")


def test_without_stable_baselines3_it_exits_naming_the_install_command():
    code = ("import runpy, sys\nsys.modules['stable_baselines3'] = None\nsys.argv = ['sac_vs_sb3.py']\n"
            "runpy.run_path('benchmarks/sac_vs_sb3.py', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "pip install --no-deps stable-baselines3" in out.stderr

"""An env worker's process loads the simulator side only: not torch, not the policies, not the data readers."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What a Ray env worker imports: its class, the channel and group plumbing it is built with, and a built-in task.
ENV_SIDE = ("embodied.workers.env_worker", "embodied.workers.env_group", "embodied.channels.ray_channel",
            "embodied.env_runtime.factory", "embodied.core.numerics", "embodied.data.format", "embodied.envs.reach")


@pytest.mark.parametrize("heavy", ["torch", "transformers", "embodied.policy.base", "embodied.data.dataset"])
def test_the_env_side_modules_import_no_heavy_module(heavy):
    code = f"import sys\nimport {', '.join(ENV_SIDE)}\nprint({heavy!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", f"importing the env side loads {heavy}"


def test_an_env_worker_built_without_torch_steps_and_limits_torch_threads_for_envs_that_load_it():
    code = """
import os, sys
import numpy as np
from embodied.channels import LocalChannel, Shard
from embodied.config import EnvConfig
from embodied.workers.env_worker import EnvWorker
from embodied.workers.link import Link

link = Link([Shard(0, 0, 0, 2)], LocalChannel("obs"), LocalChannel("act"))
worker = EnvWorker(0, EnvConfig(id="Reach-v0", num_envs=2, max_episode_steps=5), link, seed=0, torch_threads=1)
print(worker.spec().action_dim, 'torch' in sys.modules, os.environ.get("OMP_NUM_THREADS"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["4", "False", "1"]

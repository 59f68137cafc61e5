"""Resuming safely: a recipe changed in a field that changes the maths is named and refused unless told
(``runner.resume_changed``); two runs in one run dir at once are refused (``embodied.runs.lock``), a lock whose
holder is gone is taken over."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

import embodied.runs.train as runner
from embodied.config import ConfigError
from embodied.runs.lock import LOCK_FILE, RunLock
from tests.embodied.runs.test_resume import toy_config


def test_a_changed_recipe_is_named_and_refused_unless_told(tmp_path):
    first = runner.train(toy_config(tmp_path, "runner.iterations=1"))
    resume = f"runner.resume_from={first.run_dir}"
    with pytest.raises(ConfigError) as err:
        runner.train(toy_config(tmp_path, "runner.iterations=2", resume, "algorithm.gamma=0.9", "env.num_envs=2"))
    message = str(err.value)
    assert "algorithm.gamma: 0.99 in the checkpoint, 0.9 now" in message and "env.num_envs: 4 in the checkpoint" in message
    assert "runner.iterations" not in message  # how long a run goes is not its maths
    longer = runner.train(toy_config(tmp_path, "runner.iterations=2", resume, "runner.eval_every=1"))
    assert longer.run_dir == first.run_dir and longer.history[-1]["env_steps"] > 0
    told = runner.train(toy_config(tmp_path, "runner.iterations=3", resume, "algorithm.gamma=0.9",
                                   "runner.resume_changed=true"))
    assert told.run_dir == first.run_dir


def test_a_second_run_in_the_same_run_dir_is_refused_naming_the_holder(tmp_path):
    first = runner.train(toy_config(tmp_path, "runner.iterations=1"))
    assert not (first.run_dir / LOCK_FILE).exists()  # released at the end
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (first.run_dir / LOCK_FILE).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                           "since": "earlier"}))
        with pytest.raises(ConfigError, match=rf"in use by another run \(pid {holder.pid} on host "):
            runner.train(toy_config(tmp_path, "runner.iterations=2", f"runner.resume_from={first.run_dir}"))
    finally:
        holder.kill()
        holder.wait()
    # its holder is gone now: the lock is taken over and the run goes on
    resumed = runner.train(toy_config(tmp_path, "runner.iterations=2", f"runner.resume_from={first.run_dir}"))
    assert resumed.run_dir == first.run_dir and not (first.run_dir / LOCK_FILE).exists()


def test_a_lock_held_on_another_host_is_refused(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "then"}))
    with pytest.raises(ConfigError, match="pid 1 on host elsewhere"):
        RunLock(tmp_path).__enter__()
    (tmp_path / LOCK_FILE).unlink()
    with RunLock(tmp_path) as lock:
        held = json.loads(lock.path.read_text())
        assert held["host"] == socket.gethostname()
        with pytest.raises(ConfigError, match="in use by another run"):
            RunLock(tmp_path).__enter__()  # this very process holds it
    assert not (tmp_path / LOCK_FILE).exists()

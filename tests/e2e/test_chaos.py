"""``benchmarks/chaos.py`` in short: Reach SAC SIGKILLed at random moments and resumed each time ends exactly where
the uninterrupted run does (weights, learner, replay, learning metrics), with no process or partial checkpoint
left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import benchmarks.chaos as chaos_module
from benchmarks.chaos import chaos

pytestmark = pytest.mark.slow


def test_a_run_killed_three_times_ends_as_the_uninterrupted_one(tmp_path):
    report = chaos(str(Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"), kills=3, seed=0, out=tmp_path, overrides=[
        "runner.iterations=12", "runner.checkpoint_every=1", "runner.keep_checkpoints=2", "runner.eval_every=6",
        "runner.eval_episodes=8", "eval_env.num_envs=8", "algorithm.learning_starts=64", "algorithm.batch_size=64"])
    assert report.ok, report.failures
    assert len(report.kills) >= 1
    resumed = (tmp_path / "chaos.log").read_text().count("runner.resume_from=auto: continuing")
    assert resumed >= 1, report.kills  # at least one kill landed after a checkpoint, and the run went on from it


def test_worker_targets_are_refused_on_the_local_backend_and_unknown_ones_named():
    recipe = str(Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml")
    with pytest.raises(ValueError, match="cluster.backend is 'local', whose workers are threads"):
        chaos_module._check_targets(recipe, ["cluster.backend=local"], ("driver", "env_worker"))
    with pytest.raises(ValueError, match=r"--targets: \['learner'\]; choose from driver, env_worker, rollout_worker"):
        chaos_module._check_targets(recipe, [], ("driver", "learner"))
    chaos_module._check_targets(recipe, ["cluster.backend=ray"], ("driver", "rollout_worker"))  # accepted


def test_a_killed_drivers_process_tree_is_found_and_what_outlives_it_named(monkeypatch):
    # A "driver" whose child leaves its process group (as Ray's daemons do): killing the group leaves the child.
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                             "'-c', 'import os, time; os.setsid(); time.sleep(60)']); time.sleep(60)"],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the child runs in a session of its own
            tree = chaos_module._descendants(proc.pid)
            if len(tree) == 2 and os.getsid(tree[1]) != os.getsid(proc.pid):
                break
            time.sleep(0.1)
        assert len(tree) == 2 and tree[0] == proc.pid
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        monkeypatch.setattr(chaos_module, "ORPHAN_GRACE_S", 1.0)
        left = chaos_module._left_behind(tree)
        assert len(left) == 1 and str(tree[1]) in left[0] and "os.setsid()" in left[0]
        assert not chaos_module._alive(tree[1])  # and it was killed, so nothing piles up
    finally:
        proc.kill()


def test_a_left_process_is_named_by_its_program_and_arguments_whatever_the_length_of_its_path():
    deep = "/check" + "/deeper" * 30 + "/.venv/bin/python -c import os; os.setsid()"
    assert chaos_module._short_command(deep) == "python -c import os; os.setsid()"


@pytest.mark.ray
def test_on_ray_killed_workers_are_replaced_or_resumed_and_the_run_ends_as_the_uninterrupted_one(tmp_path):
    # a rollout-worker kill stops the run (then resumed); an env-worker kill is a restart and the rollout redone
    report = chaos(str(Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"), kills=3, seed=4,
                   out=tmp_path, targets=("rollout_worker", "env_worker"), overrides=[
                       "cluster.backend=ray", "runner.iterations=10", "runner.checkpoint_every=1",
                       "runner.keep_checkpoints=2", "runner.eval_every=0", "algorithm.learning_starts=64",
                       "algorithm.batch_size=64"])
    assert report.ok, (report.failures, report.kills)
    assert report.exact and any("pid" in k["what"] for k in report.kills), report.kills  # a worker kill landed


def test_kills_are_timed_from_the_runs_first_new_checkpoint_not_from_its_start(tmp_path):
    # A run whose start-up is slow (3 s) and writes iter_000002 then: the wait ends at that write, not before.
    (tmp_path / "run" / "checkpoints" / "iter_000001").mkdir(parents=True)  # from before the restart
    (tmp_path / "run" / "checkpoints" / "iter_000002.tmp").mkdir()  # one being written does not count
    target = tmp_path / "run" / "checkpoints" / "iter_000002"
    proc = subprocess.Popen([sys.executable, "-c", f"import os, time; time.sleep(3); os.mkdir({str(target)!r}); "
                             "time.sleep(30)"])
    try:
        waited = chaos_module.Progress(tmp_path).wait_for(proc, 1)
        assert target.exists() and 2.5 < waited < 20
    finally:
        proc.kill()
    proc.wait()
    assert chaos_module.Progress(tmp_path, set()).wait_for(proc, 1) < 1  # an ended run is not waited on


def test_kill_points_are_counted_in_checkpoints_still_to_come_and_a_run_going_on_is_let_write_one(tmp_path):
    reference = [f"iter_{i:06d}" for i in range(1, 11)]
    rng = chaos_module.random.Random(0)
    fresh = [chaos_module.kill_point(rng, reference, "iter_000002", fresh=True) for _ in range(200)]
    assert {count for count, _ in fresh} == set(range(0, 7))  # up to 80% of the 8 still to come
    assert all(0.0 <= share < 1.0 for _, share in fresh)
    going_on = [chaos_module.kill_point(rng, reference, "iter_000002", fresh=False)[0] for _ in range(200)]
    assert set(going_on) == {1, 2, 3}  # at least one more checkpoint, up to 30% of those to come
    assert chaos_module.kill_point(rng, reference, "iter_000010", fresh=True)[0] == 0  # none left: at once
    # The same seed draws the same kills whatever the machine's speed.
    assert ([chaos_module.kill_point(chaos_module.random.Random(3), reference, None, True) for _ in range(3)]
            == [chaos_module.kill_point(chaos_module.random.Random(3), reference, None, True) for _ in range(3)])


def test_progress_times_a_process_by_its_own_checkpoints_not_by_those_before_it(tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "iter_000001").mkdir(parents=True)  # an earlier process's
    progress = chaos_module.Progress(tmp_path)
    script = (f"import os, time; root = {str(checkpoints)!r}\n"
              "for i, pause in ((2, 0.5), (3, 1.5)):\n"
              "    time.sleep(pause); os.mkdir(os.path.join(root, f'iter_{i:06d}.tmp'))\n"
              "    os.rename(os.path.join(root, f'iter_{i:06d}.tmp'), os.path.join(root, f'iter_{i:06d}'))\n"
              "time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert progress.interval(fallback=7.0) == 7.0  # none of its own yet
        progress.wait_for(proc, 2)
        assert progress.newest() == "iter_000003" and sorted(progress.appeared) == ["iter_000002", "iter_000003"]
        assert 1.0 < progress.interval(fallback=7.0) < 5.0  # between its two, not from the earlier process's
    finally:
        proc.kill()
    proc.wait()
    assert progress.wait_for(proc, 5) < 1  # an ended process is not waited on

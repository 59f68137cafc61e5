"""An exception inside an env reaches the user with the env's own traceback and where it happened."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import embodied.runs.train as runner
from embodied.config import load_config
from embodied.core.types import EnvError, find_env_error

ROOT = Path(__file__).resolve().parents[3]
FAILING = ["env.id=tests.toy_envs:FailingEnv", "env.num_envs=4", "env.max_episode_steps=20",
           "env.kwargs={fail_at: 3, fail_env: 2}", "eval_env.kwargs={fail_at: 1000}", "eval_env.num_envs=2",
           "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
           "algorithm.num_minibatches=1", "runner.iterations=2", "runner.eval_every=0", "runner.eval_episodes=2",
           "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false", "experiment.seed=0",
           "runner.faults.restart_backoff_s=0"]


def check_message(text: str) -> None:
    assert "env 'tests.toy_envs:FailingEnv" in text
    assert "env index 2" in text and "iteration 1" in text and "chunk step 1" in text
    assert "step() at sub-step 0 of the chunk" in text  # step 3 = chunk step 1 (chunk 2), first sub-step
    assert "toy_envs.py" in text and "return 1 / 0  # the line a user must see" in text
    assert "ZeroDivisionError: division by zero" in text
    assert "chunked.py" not in text  # the framework's own frames are left out


@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_an_env_error_names_env_index_iteration_and_sub_step_with_the_users_traceback(tmp_path, request,
                                                                                      backend):
    extra = []
    if backend == "ray":
        request.getfixturevalue("ray_session")
        extra = ["cluster.backend=ray", "cluster.num_env_workers=2"]
    cfg = load_config(None, [*FAILING, *extra, f"experiment.output_dir={tmp_path}"])
    with pytest.raises(Exception) as info:
        runner.train(cfg)
    error = find_env_error(info.value)
    assert error is not None, repr(info.value)
    check_message(str(error))
    if backend == "ray":
        assert "env worker 1" in str(error)  # envs 2-3 live on the second env worker


def test_env_errors_survive_pickling_for_ray():
    error = EnvError("X-v0", 3, "reset(seed=4)", "Traceback ...\nValueError: bad", "env worker 1")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.located(10, "iteration 2").index == 13
    assert "iteration 2, env worker 1" in str(again.located(10, "iteration 2"))


def test_an_env_that_fails_to_construct_says_which_and_why():
    from embodied.envs.chunked import ChunkedVectorEnv

    def broken():
        raise KeyError("missing_asset.xml")

    with pytest.raises(EnvError, match="raised during construction") as info:
        ChunkedVectorEnv([broken], name="Mine-v0")
    assert "missing_asset.xml" in str(info.value) and "test_env_errors.py" in str(info.value)


@pytest.mark.slow
def test_the_cli_prints_the_env_traceback_and_exits_1(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "embodied.cli", "train", str(ROOT / "configs" / "reach_mlp_ppo.yaml"),
                           *FAILING, f"experiment.output_dir={tmp_path}", "runner.eval_video=none"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    check_message(proc.stderr)
    assert "Traceback (most recent call last)" not in proc.stderr  # no framework traceback on top


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_ray_env_worker_that_dies_is_noticed_in_seconds_not_at_the_channel_timeout(tmp_path, ray_session):
    import time

    cfg = load_config(None, [*FAILING, "env.id=tests.toy_envs:CrashingEnv", "env.kwargs={crash_at: 3, crash_env: 2}",
                             "eval_env.kwargs={crash_at: 1000}", "cluster.backend=ray", "cluster.num_env_workers=2",
                             "env.preflight=false", f"experiment.output_dir={tmp_path}"])
    start = time.monotonic()
    with pytest.raises(Exception, match="(?i)actor.*(died|unexpectedly|exit)"):
        runner.train(cfg)
    assert time.monotonic() - start < 60  # the channel timeout is 600 s
    logs = Path("/tmp/ray/session_latest/logs")  # Ray's default temp dir; the session the fixture started
    dumps = [p.read_text(errors="replace") for p in logs.glob("worker-*.err")]
    dump = next(d for d in dumps if "Fatal Python error: Segmentation fault" in d and "toy_envs.py" in d)
    assert 'in step' in dump and "chunked.py" in dump  # faulthandler: the env's own line and the caller's

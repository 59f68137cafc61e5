"""Env worker failures: restarts that redo the rollout epoch exactly, step timeouts, running out of restarts.

The fault-injection runs train on ``FaultyEnv``, which fails once (raises, hangs, or kills its own
process) mid-epoch; the same run with the fault already spent is the reference. A restarted run must
match it to the last bit (parameters, env steps, every episode): no transition lost or counted twice.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import embodied.runs.train as runner
from embodied.backends import LocalGroup
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ConfigError, load_config
from embodied.core.numerics import NonFiniteError
from embodied.core.types import EnvError, EnvStepTimeoutError, find_env_error
from embodied.workers.faults import StepWatch, WorkerFailure
from embodied.workers.restarts import RestartBudget, RestartRateError

FAULTY = "tests.toy_envs:FaultyEnv"


def faulty_config(tmp_path: Path, fault: str, marker: Path, *overrides: str):
    """3 iterations of PPO on FaultyEnv (4 envs, 2 env workers); 8 sub-steps per env per iteration, so
    ``fault_at=11`` fails in iteration 2, mid-episode, after the workers have stepped."""
    return load_config(None, [
        f"env.id={FAULTY}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        f"env.kwargs={{fault: {fault}, fault_at: 11, marker: '{marker}'}}", "env.step_timeout_s=1",
        "eval_env.kwargs={}", "env.preflight=false", "cluster.num_env_workers=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=3", "runner.eval_every=0",
        "runner.eval_episodes=2", "runner.checkpoint_every=0", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", "runner.faults.restart_backoff_s=0",
        f"experiment.output_dir={tmp_path}", *overrides,
    ])


RAY = ("cluster.backend=ray", "cluster.placement=disaggregated")


def train_twice(tmp_path: Path, fault: str, *overrides: str):
    """The run with the fault, then the reference run (the marker exists: no fault). A Ray run's reference runs on
    the local backend with the same placement, which gives the same bits (``test_train``'s Ray test asserts it) in
    a few seconds instead of a second Ray start."""
    marker = tmp_path / "fault.marker"
    faulted = runner.train(faulty_config(tmp_path / "faulted", fault, marker, *overrides))
    assert marker.exists()  # the fault did happen
    reference = [o for o in overrides if o != "cluster.backend=ray"]
    clean = runner.train(faulty_config(tmp_path / "clean", fault, marker, *reference))
    return faulted, clean


def assert_same_run(faulted, clean) -> None:
    params_f = load_checkpoint(faulted.checkpoint)["actor"]["policy"]
    params_c = load_checkpoint(clean.checkpoint)["actor"]["policy"]
    assert params_f.keys() == params_c.keys()
    for key in params_f:
        assert torch.equal(params_f[key], params_c[key]), key
    for mf, mc in zip(faulted.history, clean.history, strict=True):
        for key in ("env_steps", "env/episodes", "env/return", "env/success_rate", "train/loss"):
            assert mf[key] == mc[key] or (np.isnan(mf[key]) and np.isnan(mc[key])), key
    assert faulted.history[-1]["env_steps"] == 3 * 4 * 4 * 2  # iterations x envs x chunk steps x chunk


@pytest.mark.parametrize("fault", ["raise", "hang"])
def test_a_failed_env_worker_is_restarted_and_the_epoch_redone_exactly_local(tmp_path, fault, capfd):
    faulted, clean = train_twice(tmp_path, fault)
    assert_same_run(faulted, clean)
    assert [m["workers/restarts"] for m in faulted.history] == [0.0, 1.0, 1.0]
    assert [m["workers/restarts"] for m in clean.history] == [0.0, 0.0, 0.0]
    err = capfd.readouterr().err
    assert "[restart 1; 1/3 within 20 iterations] iteration 2: env worker" in err
    assert ("hung in step() at sub-step" in err) if fault == "hang" else ("ZeroDivisionError" in err)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["hang", "kill"])
def test_a_failed_env_worker_is_restarted_and_the_epoch_redone_exactly_ray(tmp_path, fault, ray_session, capfd):
    """A hang and a death, which Ray reports its own ways. An env that raises on Ray is restarted and redone exactly
    in ``test_replayed_faults`` and ``test_restart_rate`` (their Ray tests), so it is not run a fourth time here."""
    faulted, clean = train_twice(tmp_path, fault, *RAY)
    assert_same_run(faulted, clean)
    assert faulted.history[-1]["workers/restarts"] == 1.0
    err = capfd.readouterr().err
    assert "[restart 1; 1/3 within 20 iterations] iteration 2: env worker" in err
    if fault == "kill":
        assert "died" in err


def test_the_restart_count_is_kept_in_checkpoints(tmp_path):
    marker = tmp_path / "fault.marker"
    result = runner.train(faulty_config(tmp_path, "raise", marker))
    state = load_checkpoint(result.checkpoint)
    assert state["worker_restarts"] == 1 and state["restart_state"]["recent"] == [2]  # the window goes on after resume


def test_when_the_rate_is_spent_the_error_names_env_worker_env_index_iteration_and_sub_step(tmp_path, capfd):
    cfg = load_config(None, [
        "env.id=tests.toy_envs:FailingEnv", "env.kwargs={fail_at: 3, fail_env: 1}", "env.num_envs=4",
        "cluster.num_env_workers=2", "env.preflight=false", "eval_env.num_envs=2", "policy.type=mlp",
        "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=1",
        "runner.iterations=2", "runner.eval_every=0", "runner.faults.max_worker_restarts=2", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", "runner.faults.restart_backoff_s=0",
        f"experiment.output_dir={tmp_path}",
    ])
    with pytest.raises(RestartRateError) as info:
        runner.train(cfg)
    message = str(info.value)
    assert "env index 1" in message and "env worker 0" in message and "iteration 1" in message
    assert "sub-step 0 of the chunk" in message and "chunk step 1" in message and "ZeroDivisionError" in message
    assert "env worker 0 (tests.toy_envs:FailingEnv, envs 0-1) raised" in message
    assert "faults came faster than runner.faults.max_worker_restarts=2 within runner.faults.restart_window=20 iterations" in message
    assert find_env_error(info.value) is not None  # the env's own error stays behind it (the CLI prints it)
    err = capfd.readouterr().err
    assert "[restart 1; 1/2 within" in err and "[restart 2; 2/2 within" in err and "[restart 3;" not in err


def test_with_no_restarts_a_hung_env_stops_the_run_within_the_timeout_and_names_where_it_hangs(tmp_path):
    cfg = faulty_config(tmp_path, "hang", tmp_path / "marker", "runner.faults.max_worker_restarts=0")
    t0 = time.monotonic()
    with pytest.raises(RestartRateError, match="runner.faults.max_worker_restarts=0 allows no restart") as info:
        runner.train(cfg)
    assert isinstance(find_env_error(info.value), EnvStepTimeoutError)
    assert time.monotonic() - t0 < 30  # not the 600 s channel timeout
    message = str(info.value)
    assert "did not return from step() at sub-step" in message and "env.step_timeout_s=1 s" in message
    assert "iteration 2" in message and "env worker" in message
    assert "toy_envs.py" in message and "threading.Event().wait()" in message  # the user's line it hangs on
    hung = [t for t in threading.enumerate() if t.name.startswith("EnvWorker") and t.is_alive()]
    assert hung and all(t.daemon for t in hung)  # left behind, but they never keep the process from exiting


def test_non_finite_numbers_are_not_restarted(tmp_path, capfd):
    cfg = load_config(None, [
        "env.id=tests.toy_envs:NanEnv", "env.kwargs={nan_at: 3, nan_env: 1}", "env.num_envs=2", "env.preflight=false",
        "eval_env.num_envs=2", "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2",
        "rollout.chunk_steps=4", "algorithm.num_minibatches=1", "runner.iterations=1", "runner.eval_every=0",
        "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={tmp_path}",
    ])
    with pytest.raises(NonFiniteError):
        runner.train(cfg)
    assert "[restart" not in capfd.readouterr().err


def test_a_hung_eval_env_is_restarted_and_its_round_redone(tmp_path, capfd):
    marker = tmp_path / "eval.marker"
    overrides = ("runner.eval_every=1", f"eval_env.kwargs={{fault: hang, fault_at: 3, marker: '{marker}'}}",
                 "runner.faults.max_worker_restarts=1")
    faulted = runner.train(faulty_config(tmp_path / "faulted", "raise", tmp_path / "unused", *overrides,
                                         "env.kwargs={}"))
    assert marker.exists()
    clean = runner.train(faulty_config(tmp_path / "clean", "raise", tmp_path / "unused", *overrides,
                                       "env.kwargs={}"))
    assert "[restart 1; 1/1 within 20 iterations] eval episodes from 0 at iteration 1: eval_env worker" in \
        capfd.readouterr().err
    for mf, mc in zip(faulted.history, clean.history, strict=True):
        assert mf["eval/return"] == mc["eval/return"] and mf["eval/episodes"] == mc["eval/episodes"] == 2


def test_a_hung_eval_env_never_blocks_the_end_of_training(tmp_path, capfd):
    marker = tmp_path / "eval.marker"
    cfg = faulty_config(tmp_path, "raise", tmp_path / "unused", "env.kwargs={}", "runner.eval_every=1",
                        f"eval_env.kwargs={{fault: hang, fault_at: 3, marker: '{marker}'}}",
                        "runner.faults.max_worker_restarts=0")
    with pytest.warns(UserWarning, match="eval at iteration 1 failed, periodic eval switched off"):
        result = runner.train(cfg)
    assert [it.get("eval/failed") for it in result.history] == [1.0, None, None]
    assert result.checkpoint is not None and result.checkpoint.name == "iter_000003"
    assert re.search(r"eval_env workers \[[01]\] hung and are not closed", capfd.readouterr().err)


# -- units ---------------------------------------------------------------------------------------


class _SlowVenv:
    """A vector env whose step of env 1 at sub-step 2 takes ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay, self.progress = delay, None

    def chunk_step(self) -> None:
        for i in range(2):
            for c in range(3):
                self.progress = (time.monotonic(), i, c)
                if (i, c) == (1, 2):
                    time.sleep(self.delay)


def test_step_watch_reports_an_overdue_step_once_with_its_env_index_and_sub_step():
    hangs: list[EnvStepTimeoutError] = []
    watch = StepWatch(0.2, "Toy-v0", 3, hangs.append)
    venv = _SlowVenv(delay=1.0)
    with watch.watching(venv, 10, "iteration 4, chunk step 5"):
        venv.chunk_step()
    watch.close()
    assert len(hangs) == 1
    error = hangs[0]
    assert error.index == 11 and error.worker_rank == 3
    assert "step() at sub-step 2 of the chunk within env.step_timeout_s=0.2 s" in str(error)
    assert "env worker 3, iteration 4, chunk step 5" in str(error)
    assert "time.sleep(self.delay)" in error.env_traceback  # where the env's thread was


def test_step_watch_lets_steps_within_the_limit_pass():
    hangs: list = []
    watch = StepWatch(0.5, "Toy-v0", 0, hangs.append)
    venv = _SlowVenv(delay=0.05)
    for _ in range(5):
        with watch.watching(venv, 0, ""):
            venv.chunk_step()
        time.sleep(0.2)  # between calls (waiting for actions) nothing is timed
    watch.close()
    assert hangs == []


def test_restart_budget_stops_when_the_window_is_spent_and_raises_what_is_not_restartable():
    budget = RestartBudget(1)
    env_error = EnvError("Toy-v0", 2, "step()", "Traceback ...\nValueError: boom\n", "env worker 0, iteration 3")
    failure = WorkerFailure("env", "Toy-v0", {0}, env_error, envs={0: (0, 4)})
    budget.restart(failure, 3, replayed=False)
    assert budget.used == 1
    with pytest.raises(RestartRateError) as info:
        budget.restart(failure, 4, replayed=False)
    assert "runner.faults.max_worker_restarts=1 within runner.faults.restart_window=20" in str(info.value)
    assert str(info.value).endswith("ValueError: boom")  # the last failure's own error, after the message
    with pytest.raises(ValueError, match="a bug"):
        RestartBudget(3).restart(WorkerFailure("env", "Toy-v0", {0}, ValueError("a bug")), 1, replayed=False)


class _Worker:
    def __init__(self, n: int) -> None:
        self.n = n

    def block(self, event: threading.Event) -> None:
        event.wait()

    def value(self) -> int:
        return self.n


def test_local_group_restart_abandons_a_hung_thread_and_serves_the_new_worker():
    group = LocalGroup(_Worker, [(1,), (2,)])
    stuck = threading.Event()
    group.call_each("block", [(stuck,), (threading.Event(),)])  # rank 0 waits on `stuck`, rank 1 forever
    group.restart(1, (20,))
    assert group.call("value")[1].result(timeout=5) == 20
    stuck.set()
    assert group.call("value")[0].result(timeout=5) == 1
    group.close()


def test_config_checks_step_timeout_and_restart_budget():
    with pytest.raises(ConfigError, match="env.step_timeout_s: must be a positive number"):
        load_config(None, ["env.step_timeout_s=0"])
    with pytest.raises(ConfigError, match="runner.faults.max_worker_restarts: must be >= 0"):
        load_config(None, ["runner.faults.max_worker_restarts=-1"])
    assert load_config(None, ["env.step_timeout_s=null"]).resolved_eval_env().step_timeout_s is None

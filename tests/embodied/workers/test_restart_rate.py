"""Faults over a long run: a restart rate (not a lifetime count), backoff, an env broken in every process, and a
checkpoint before a fault stops the run.

The runs train PPO on 2 envs of one env worker with tiny epochs (2 sub-steps per env per iteration), so 90
iterations take seconds. ``SporadicFaultEnv`` raises once every ``every`` steps of the run (a transient fault:
the exact replay passes); ``WearingOutEnv`` raises in every step from its ``fault_from``-th since it was built,
from any state, so every process rebuilt for it fails too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ConfigError, load_config
from embodied.core.types import EnvError
from embodied.workers.faults import WorkerFailure
from embodied.workers.restarts import (Backoff, BrokenEnvError, BrokenEnvWatch, RestartBudget, RestartRateError,
                                       RestartWindow)

SPORADIC = "tests.toy_envs:SporadicFaultEnv"
WEARING = "tests.toy_envs:WearingOutEnv"
RAY = ("cluster.backend=ray", "cluster.placement=disaggregated")


def rate_overrides(out: Path, env_id: str, env_kwargs: str, *overrides: str) -> list[str]:
    """PPO on 2 envs of one env worker, 2 sub-steps per env per iteration (action chunk 1, 2 chunk steps)."""
    return [f"env.id={env_id}", f"env.kwargs={env_kwargs}", "env.num_envs=2", "env.max_episode_steps=4",
            "eval_env.num_envs=2", "eval_env.kwargs={}", "env.preflight=false", "policy.type=mlp",
            "policy.hidden_sizes=[8]", "policy.action_chunk=1", "rollout.chunk_steps=2", "algorithm.num_minibatches=1",
            "algorithm.update_epochs=1", "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=0",
            "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false", "runner.eval_video=none",
            f"experiment.output_dir={out}", *overrides]


def rate_config(out: Path, env_id: str, env_kwargs: str, *overrides: str):
    return load_config(None, rate_overrides(out, env_id, env_kwargs, *overrides))


def restarted_at(history: list[dict[str, float]]) -> list[int]:
    """The iterations whose row counts one restart more than the row before."""
    counts = [0.0] + [m["workers/restarts"] for m in history]
    return [it for it in range(1, len(counts)) if counts[it] > counts[it - 1]]


def metrics_rows(run_dir: Path) -> dict[int, dict[str, float]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines)}


# -- 1. sporadic faults survive with the defaults ---------------------------------------------------


def check_sporadic(tmp_path: Path, capfd, *overrides: str) -> None:
    """One fault every 30 iterations for 90 iterations, with the default rate and backoff: every fault is one
    restart, the run completes, each epoch whole."""
    marker = tmp_path / "fault"
    result = runner.train(rate_config(tmp_path, SPORADIC, f"{{every: 60, marker: '{marker}'}}", "runner.iterations=90",
                                      *overrides))
    assert len(result.history) == 90 and result.checkpoint is not None and result.checkpoint.name == "iter_000090"
    assert restarted_at(result.history) == [30, 60, 90]
    assert result.history[-1]["workers/restarts"] == 3.0  # every fault counted
    assert max(m["workers/restarts_in_window"] for m in result.history) == 1.0
    assert [result.history[i]["workers/restarts_in_window"] for i in (29, 48, 49, 59)] == [1.0, 1.0, 0.0, 1.0]
    assert result.history[-1]["workers/backoff_s"] == 0.0  # each rebuild the first in its window
    assert result.history[-1]["env_steps"] == 90 * 2 * 2  # nothing lost, nothing counted twice
    assert sorted(p.name for p in tmp_path.glob("fault.*")) == ["fault.120", "fault.180", "fault.60"]
    err = capfd.readouterr().err
    for k, it in enumerate((30, 60, 90), 1):
        assert f"[restart {k}; 1/3 within 20 iterations] iteration {it}: env worker 0" in err


def test_sporadic_faults_over_90_iterations_survive_the_default_rate_local(tmp_path, capfd):
    """The rate is the driver's arithmetic, the same on both backends; Ray's restarts of one env worker, again and
    again, are the burst test's below."""
    check_sporadic(tmp_path, capfd)


# -- 2. a burst beyond the window stops, after a checkpoint, with the resume command ---------------------


def check_burst(tmp_path: Path, capfd, *overrides: str, resume: bool = True) -> None:
    """A fault every other iteration (2, 4, 6, 8): the fourth within 20 iterations stops the run at iteration 8,
    after checkpointing iteration 7; the rebuilds of 4 and 6 waited (backoff 0.01 s doubling, capped at 0.015 s);
    with ``resume``, the checkpoint resumes."""
    marker = tmp_path / "fault"
    overrides = (f"{{every: 4, marker: '{marker}'}}", "runner.faults.restart_backoff_s=0.01",
                 "runner.faults.restart_backoff_max_s=0.015", *overrides)
    with pytest.raises(RestartRateError) as info:
        runner.train(rate_config(tmp_path, SPORADIC, *overrides[:1], "runner.iterations=12", *overrides[1:]))
    run_dir = info.value.run_dir
    checkpoint = run_dir / "checkpoints" / "iter_000007"
    message = str(info.value)
    assert "iteration 8: env worker 0 (tests.toy_envs:SporadicFaultEnv, envs 0-1) raised" in message
    assert ("not restarted: faults came faster than runner.faults.max_worker_restarts=3 within runner.faults.restart_window=20 "
            "iterations (restarts at iterations 2, 4, 6; 3 in the run)") in message
    assert f"the run stopped: its last checkpoint is {checkpoint}. Resume it with runner.resume_from={run_dir}" in message
    assert message.rstrip().endswith("ZeroDivisionError: division by zero")  # the env's own error, last
    state = load_checkpoint(checkpoint)  # the iteration before the failed epoch, whose snapshot it holds
    assert state["iteration"] == 7 and state["env_steps"] == 7 * 2 * 2 and state["worker_restarts"] == 3
    assert state["restart_state"]["recent"] == [2, 4, 6]
    rows = metrics_rows(run_dir)
    assert sorted(rows) == list(range(1, 8)) and rows[7]["workers/restarts_in_window"] == 3.0
    assert rows[7]["workers/backoff_s"] == pytest.approx(0.025)  # logged: 0.01 s, then 0.02 s capped at 0.015 s
    err = capfd.readouterr().err
    assert "[restart 1; 1/3 within 20 iterations] iteration 2" in err and "[restart 4" not in err
    assert "[restart 2; 2/3 within 20 iterations] iteration 4" in err and "waiting 0.01 s first" in err
    assert "[restart 3; 3/3 within 20 iterations] iteration 6" in err and "waiting 0.015 s first" in err
    if not resume:
        return
    # Nothing lost: the run goes on from iteration 8 (its fault's marker is spent), the window where it was.
    resumed = runner.train(rate_config(tmp_path, SPORADIC, *overrides[:1], "runner.iterations=9",
                                       f"runner.resume_from={run_dir}", *overrides[1:]))
    assert [m["env_steps"] for m in resumed.history] == [32.0, 36.0]
    assert [m["workers/restarts_in_window"] for m in resumed.history] == [3.0, 3.0]


def test_a_burst_of_faults_beyond_the_window_stops_with_a_checkpoint_and_the_resume_command_local(tmp_path, capfd):
    check_burst(tmp_path, capfd)


@pytest.mark.slow
def test_a_burst_of_faults_beyond_the_window_stops_with_a_checkpoint_and_the_resume_command_ray(tmp_path, capfd,
                                                                                                ray_session):
    check_burst(tmp_path, capfd, *RAY, resume=False)  # resuming is the same on both backends (test_resume.py)


def test_the_cli_names_the_checkpoint_and_the_resume_command_and_exits_1(tmp_path, capfd):
    from embodied.cli import main

    config = str(Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_ppo.yaml")
    overrides = rate_overrides(tmp_path, SPORADIC, f"{{every: 4, marker: '{tmp_path / 'fault'}'}}",
                               "runner.iterations=3", "runner.faults.max_worker_restarts=0")
    assert main(["train", config, *overrides]) == 1
    err = capfd.readouterr().err
    (run_dir,) = tmp_path.glob("*-*")
    assert "runner.faults.max_worker_restarts=0 allows no restart; the run stopped: its last checkpoint is " \
           f"{run_dir / 'checkpoints' / 'iter_000001'}" in err
    assert "ZeroDivisionError" in err and "Traceback (most recent call last)" not in err
    assert f"resume with: embodied train {config} " in err and f"runner.resume_from={run_dir}\n" in err


# -- 3. an env broken in every process stops with that diagnosis in <= 3 rebuilds --------------------------


def check_broken(tmp_path: Path, capfd, *overrides: str) -> None:
    """Env 1 fails in every step from its 3rd since it was built: at iteration 2, again on the exact replay,
    then in the process rebuilt from fresh seeds at iteration 3, and in the next one at iteration 4. A window of
    10 restarts would allow more; the diagnosis stops the run after 3 rebuilds, with a checkpoint of iteration 3."""
    cfg = rate_config(tmp_path, WEARING, "{fault_from: 3, fail_env: 1}", "eval_env.kwargs={fail_env: -1}",
                      "runner.iterations=10", "runner.faults.max_worker_restarts=10", "runner.faults.restart_backoff_s=0.01",
                      *overrides)
    with pytest.raises(BrokenEnvError) as info:
        runner.train(cfg)
    run_dir, message = info.value.run_dir, str(info.value)
    assert ("env worker 0 (tests.toy_envs:WearingOutEnv, envs 0-1) fails from any state: it raised in step() in 4 "
            "processes in a row (failures at iterations 2, 2, 3, 4, each within runner.faults.broken_env_iterations=5 of "
            "the one before): the 3 fresh processes rebuilt for it") in message
    assert ("`embodied check-env tests.toy_envs:WearingOutEnv --obs-mode state --max-episode-steps 4 --steps 1000 "
            "--kwargs '{\"fault_from\": 3, \"fail_env\": 1}'`") in message
    checkpoint = run_dir / "checkpoints" / "iter_000003"
    assert f"its last checkpoint is {checkpoint}. Resume it with runner.resume_from={run_dir}" in message
    state = load_checkpoint(checkpoint)
    assert state["worker_restarts"] == 3 and state["episodes_dropped"] == 4  # two fresh rebuilds of 2 envs
    err = capfd.readouterr().err
    assert "[restart 2; 2/10 within 20 iterations] iteration 2" in err and "again on the exact replay" in err
    assert "[restart 3; 3/10 within 20 iterations] iteration 3" in err and "a first sign of an env that fails" in err
    assert "[restart 4" not in err


def test_an_env_that_fails_in_every_fresh_process_stops_with_the_diagnosis_in_3_rebuilds_local(tmp_path, capfd):
    check_broken(tmp_path, capfd)


@pytest.mark.slow
def test_an_env_that_fails_in_every_fresh_process_stops_with_the_diagnosis_in_3_rebuilds_ray(tmp_path, capfd,
                                                                                              ray_session):
    check_broken(tmp_path, capfd, *RAY)


# -- eval shares the rate and never ends training ----------------------------------------------------------


def test_an_eval_env_broken_in_every_process_ends_the_eval_not_training(tmp_path):
    cfg = rate_config(tmp_path, WEARING, "{fail_env: -1}", "eval_env.kwargs={fault_from: 2, fail_env: 1}",
                      "runner.iterations=3", "runner.eval_every=1", "runner.faults.restart_backoff_s=0")
    with pytest.warns(UserWarning, match="(?s)eval at iteration 1 failed, periodic eval switched off: BrokenEnvError: "
                                         "eval_env worker 0 .* fails from any state"):
        result = runner.train(cfg)
    assert len(result.history) == 3 and result.checkpoint is not None and result.checkpoint.name == "iter_000003"
    assert result.history[0]["eval/failed"] == 1.0 and result.history[0]["eval/episodes_dropped"] == 2.0
    assert result.history[-1]["workers/restarts"] == 3.0  # the eval's restarts count in the run's rate


# -- the pure parts --------------------------------------------------------------------------------------


def failure(iteration: int, chunk_step: int = 0, call: str = "step() at sub-step 0 of the chunk", rank: int = 0,
            section: str = "env") -> WorkerFailure:
    error = EnvError("Toy-v0", 1, call, "Traceback ...\nZeroDivisionError: division by zero\n",
                     f"env worker {rank}, iteration {iteration}, chunk step {chunk_step}")
    return WorkerFailure(section, "Toy-v0", {rank}, error, envs={rank: (0, 2)}, reproduce="embodied check-env Toy-v0")


def test_the_window_allows_the_limit_within_any_window_and_slides():
    window = RestartWindow(3, 20)
    for it in (1, 2, 3):
        assert window.refusal(it) is None
        window.add(it)
    assert "runner.faults.max_worker_restarts=3 within runner.faults.restart_window=20 iterations (restarts at iterations 1, 2, 3" \
        in window.refusal(20)
    assert window.count(21) == 2 and window.refusal(21) is None  # iteration 1 left the window
    capped = RestartWindow(3, 20, cap=2)
    capped.add(1), capped.add(50)
    assert "runner.faults.max_total_restarts=2" in capped.refusal(100) and capped.count(100) == 0
    assert "allows no restart" in RestartWindow(0).refusal(1)


def test_backoff_doubles_for_quick_rebuilds_of_a_worker_is_capped_and_resets_after_a_quiet_window():
    backoff = Backoff(1.0, 3.0, within=20)
    assert [backoff.delay("env0", it)[0] for it in (1, 1, 5, 9, 12)] == [0.0, 1.0, 2.0, 3.0, 3.0]
    assert backoff.delay("env1", 12) == (0.0, 0)  # another worker: its own count
    assert backoff.delay("env0", 40) == (0.0, 0)  # 28 iterations after its last rebuild: quiet again


def test_a_budget_waits_its_backoff_with_the_injected_clock_and_logs_it(capfd):
    sleeps: list[float] = []
    budget = RestartBudget(10, backoff_s=0.5, backoff_max_s=1.5, sleep=sleeps.append)
    for chunk_step in range(4):  # four transient faults of one worker in one iteration (each somewhere else)
        f = failure(7, chunk_step, call=f"reset(seed={chunk_step})")
        budget.announce(f, "iteration 7", budget.restart(f, 7, replayed=False))
    assert sleeps == [0.5, 1.0, 1.5]
    assert budget.metrics(7) == {"workers/restarts": 4.0, "workers/restarts_in_window": 4.0, "workers/backoff_s": 3.0}
    err = capfd.readouterr().err
    assert "[restart 2; 2/10 within 20 iterations] iteration 7" in err and "waiting 0.5 s first (rebuild 2" in err
    assert "waiting 1.5 s first (rebuild 4 of this worker in a row" in err


def test_the_watch_tells_an_env_broken_in_every_process_from_one_state_that_fails():
    watch = BrokenEnvWatch(within=5)

    def record(f: WorkerFailure, it: int, fresh: bool, explained: bool = False) -> int:
        streak = watch.judge("env0", f, it, explained)
        watch.record("env0", streak, fresh)
        return streak.strikes

    # The exact replay fails where the original did (one state), then the fresh process fails alike: strikes.
    assert [record(failure(2), 2, False), record(failure(2), 2, True)] == [0, 0]
    assert record(failure(3), 3, True) == 1 and BrokenEnvWatch.broken(watch.judge("env0", failure(4), 4))
    # Exact rebuilds that fail again later (transient faults, a burst of them): no strike, the rate's business.
    watch.streaks.clear()
    assert [record(failure(it), it, False) for it in (2, 3, 4, 5)] == [0, 0, 0, 0]
    record(failure(6), 6, True)
    # Another call, or a failure beyond the horizon, starts a new streak; a fault known to replay is no strike.
    assert watch.judge("env0", failure(4, call="reset(seed=3)"), 4).strikes == 0
    assert watch.judge("env0", failure(12), 12).strikes == 0
    assert watch.judge("env0", failure(7), 7).strikes == 1  # the process rebuilt from fresh seeds at 6 failed
    assert watch.judge("env0", failure(7), 7, explained=True).strikes == 0
    assert BrokenEnvWatch(within=None).judge("env0", failure(4), 4).strikes == 0


def test_a_broken_env_stops_before_the_window_is_spent_and_the_state_survives_a_checkpoint():
    budget = RestartBudget(10)
    for it, replayed in ((2, False), (2, True), (3, False)):
        budget.restart(failure(it), it, replayed)
    with pytest.raises(BrokenEnvError, match="it raised in step\\(\\) in 4 processes in a row") as info:
        budget.restart(failure(4), 4, replayed=False)
    assert "Next step: reproduce it outside training with `embodied check-env Toy-v0`" in str(info.value)
    assert budget.used == 3 and budget.window.count(4) == 3  # 7 restarts of the window left, not spent
    again = RestartBudget(10)
    state = torch.load(_saved(budget.state_dict()), weights_only=True)  # as a checkpoint loads it
    again.load_state_dict(state)
    assert again.state_dict() == budget.state_dict()
    with pytest.raises(BrokenEnvError):
        again.restart(failure(4), 4, replayed=False)


def _saved(state: dict) -> object:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_bad_restart_settings_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match="runner.faults.restart_window: must be >= 1"):
        load_config(None, ["runner.faults.restart_window=0"])
    with pytest.raises(ConfigError, match="runner.faults.max_total_restarts: a lifetime cap must be >= 0"):
        load_config(None, ["runner.faults.max_total_restarts=-1"])
    with pytest.raises(ConfigError, match="runner.faults.restart_backoff_max_s: the backoff's cap must be >= its base "
                                          "runner.faults.restart_backoff_s=10, got 5.0"):
        load_config(None, ["runner.faults.restart_backoff_s=10", "runner.faults.restart_backoff_max_s=5"])
    with pytest.raises(ConfigError, match="runner.faults.restart_backoff_s: must be a number of seconds >= 0"):
        load_config(None, ["runner.faults.restart_backoff_s=-1"])
    with pytest.raises(ConfigError, match="runner.faults.broken_env_iterations: must be >= 0"):
        load_config(None, ["runner.faults.broken_env_iterations=-1"])
    r = load_config(None).runner.faults
    assert (r.max_worker_restarts, r.restart_window, r.max_total_restarts, r.restart_backoff_s,
            r.restart_backoff_max_s, r.broken_env_iterations) == (3, 20, None, 5.0, 300.0, 5)

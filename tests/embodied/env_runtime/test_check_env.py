"""`embodied check-env` tells the truth: a good simulator passes, and each mistake is one row naming it and the fix."""

from __future__ import annotations

import json

import pytest
from tests.embodied.env_runtime.faulty_envs import (
    Seeded, FourTuple, NoSuccess, Float64States, Float64Space, MisnamedKey, DiscreteActions, NotAnEnv,
    NeverEnds, NaNReward, NaNObs, BlackCamera, IgnoresSeed, CrashInInit, CrashOnReset, CrashInStep, NeedsArg,
    UntypedSpeed, NoRenderMode, FloatFrames, BlackFrames, NoTask, IgnoresAutoResetOff, NoFinalObs, NaNFinalObs,
    BatchIgnoresSeed, BatchBlackRender, BatchNeverEnds, BatchFloat64, PlainNoSuccess, Sloppy, MisnamedBatch)

from embodied.config import EnvConfig
from embodied.env_runtime.check_env import check_env, main

HERE = "tests/embodied/env_runtime/faulty_envs.py"  # where the simulators' tracebacks point


def env_id(env_cls) -> str:
    """``module:Class``, as a user names their env (nothing is left registered for later tests)."""
    return f"{env_cls.__module__}:{env_cls.__qualname__}"


def results(env_cls, **cfg):
    return check_env(EnvConfig(id=env_id(env_cls), num_envs=2, **{"max_episode_steps": 20, **cfg}), steps=40)


def rows(env_cls, severity: str, **cfg) -> dict[str, str]:
    """The rows of one severity ('error' or 'warning'), as 'detail | fix: fix'."""
    return {r.name: f"{r.detail} | fix: {r.fix}" for r in results(env_cls, **cfg) if r.severity == severity}


def only_row(env_cls, **cfg):
    """An error that stops all checks: exactly one row, a failure."""
    found = results(env_cls, **cfg)
    assert len(found) == 1 and not found[0].passed, [(r.name, r.detail) for r in found]
    return found[0]


# -- good simulators pass -----------------------------------------------------------------------------


def test_builtin_reach_passes_every_check(capsys):
    assert main(["Reach-v0", "--steps", "40"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "WARN" not in out and " 0 failed" in out
    for row in ("render() frames for videos", "task_description", "reset-seed determinism", "info['success']"):
        assert f"PASS  {row}" in out


def test_a_good_batched_env_gets_every_check():
    found = {r.name: r for r in check_env(EnvConfig(id="tests.toy_batched:PointMassBatch", max_episode_steps=20))}
    assert all(r.severity == "ok" for r in found.values()), found
    for name in ("reset-seed determinism", "chunk-step rules and final_obs (auto_reset on)",
                 "auto_reset=False: done envs stay done", "render() frames for videos",
                 "episode ends within max_episode_steps", "task_descriptions"):
        assert name in found


# -- one clear row per mistake ------------------------------------------------------------------------


@pytest.mark.parametrize("env_cls, check, words", [
    (FourTuple, "step returns (obs, reward, terminated, truncated, info)", "a tuple of 4 items"),
    (Float64States, "observations: keys, dtypes, shapes, finite", "states is float64"),
    (NeverEnds, "episode ends within max_episode_steps", "max_episode_steps=20"),
    (NaNReward, "observations: keys, dtypes, shapes, finite", "reward is nan"),
    (NaNObs, "observations: keys, dtypes, shapes, finite", "step 3: states[2] is nan"),
    (FloatFrames, "render() frames for videos", "float64"),
    (BlackFrames, "render() frames for videos", "black"),
])
def test_a_mistake_is_named_with_its_fix(env_cls, check, words):
    found = rows(env_cls, "error")
    assert check in found, found
    assert words in found[check] and "fix:" in found[check]


def test_nan_observations_are_reported_as_nan_not_as_a_seeding_failure():
    found = results(NaNObs)
    by_name = {r.name: r for r in found}
    assert by_name["reset-seed determinism"].severity == "ok"
    assert "states[2] is nan" in by_name["observations: keys, dtypes, shapes, finite"].detail


def test_black_image_observations_fail():
    found = rows(BlackCamera, "error", obs_mode="rgb")
    assert "main_images are black" in found["observations: keys, dtypes, shapes, finite"]


def test_a_four_tuple_stops_the_checks_that_need_step():
    names = [r.name for r in results(FourTuple)]
    assert names[-1] == "step returns (obs, reward, terminated, truncated, info)"


@pytest.mark.parametrize("env_cls, words, fix", [
    (Float64Space, "'states' must be a 1-D float32 Box", "float32"),
    (MisnamedKey, "got ['state']", "rename them"),
    (DiscreteActions, "Discrete action space", "gymnasium.spaces.Box"),
    (NotAnEnv, "is not a gymnasium env", "gymnasium.Env subclass"),
])
def test_a_class_that_does_not_fit_is_one_row_naming_it(env_cls, words, fix):
    row = only_row(env_cls)
    assert row.name == "import, construct and reset"
    assert env_cls.__name__ in row.detail and words in row.detail, row.detail
    assert fix in row.fix


def test_a_batched_env_with_unknown_or_float64_observations_is_named():
    assert "states is float64" in rows(BatchFloat64, "error")["observations: keys, dtypes, shapes, finite"]


# -- errors that stop every check: one row, a fix that fits -------------------------------------------


def test_a_module_python_cannot_find_says_pythonpath_and_pip_install():
    row = only_row_id("no_such_pkg.sim:Env")
    assert "no_such_pkg" in row.detail
    assert "PYTHONPATH" in row.fix and "pip install -e" in row.fix


def test_a_missing_class_lists_the_module_s_envs(tmp_path, monkeypatch):
    (tmp_path / "my_sims.py").write_text("import gymnasium as gym\n\nclass ArmEnv(gym.Env):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    row = only_row_id("my_sims:ArmEnvv")
    assert "ArmEnvv" in row.detail and "ArmEnv" in row.fix


def test_a_missing_dependency_names_it_and_shows_the_import_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "dep_sims.py").write_text("import gymnasium as gym\nimport not_installed_physics\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["dep_sims:Env"]) == 1
    out = capsys.readouterr().out
    assert "pip install not_installed_physics" in out
    assert "dep_sims.py\", line 2" in out and out.count("FAIL") == 1


def only_row_id(env_id: str):
    found = check_env(EnvConfig(id=env_id))
    assert len(found) == 1 and not found[0].passed, found
    return found[0]


def test_unknown_id_fails_with_suggestion(capsys):
    assert main(["Reech-v0"]) == 1
    out = capsys.readouterr().out
    assert "did you mean 'Reach-v0'" in out and out.count("FAIL") == 1


def test_a_constructor_missing_an_argument_lists_its_signature():
    row = only_row(NeedsArg)
    assert "robot" in row.detail
    assert "NeedsArg(obs_mode: str, max_episode_steps: int, robot: str)" in row.fix


def test_an_unknown_kwarg_is_one_row_with_the_signature():
    row = only_row(Seeded, kwargs={"speeed": 2})
    assert "env.kwargs.speeed" in row.detail and "Seeded(" in row.fix and "terminate_at" in row.fix


def test_a_wrong_kwarg_type_is_named_by_the_annotation():
    row = only_row(Seeded, kwargs={"terminate_at": "3"})
    assert "terminate_at" in row.detail and "int" in row.detail


@pytest.mark.parametrize("env_cls, where", [(CrashInInit, "__init__"), (CrashOnReset, "reset")])
def test_a_crash_is_one_row_and_prints_the_env_s_own_traceback(env_cls, where, capsys):
    assert main([env_id(env_cls)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == 1 and "see the traceback above" in out
    assert f'{HERE}", line' in out and f"in {where}() at {HERE}:" in out
    assert out.index("Traceback") < out.index("FAIL")


def test_a_crash_in_step_stops_the_checks_with_one_row():
    found = results(CrashInStep)
    assert sum(not r.passed for r in found) == 1
    assert "ZeroDivisionError" in found[-1].detail and f"step() at {HERE}" in found[-1].detail


def test_a_crash_from_a_wrong_untyped_kwarg_points_at_the_kwarg():
    found = results(UntypedSpeed, kwargs={"speed": "fast"})
    crash = next(r for r in found if not r.passed)
    assert f"at {HERE}" in crash.detail
    assert "env.kwargs.speed='fast' is a str, but its default is the float 0.1" in crash.fix


# -- what only degrades results: warnings, not failures ------------------------------------------------


@pytest.mark.parametrize("env_cls, check, words", [
    (NoSuccess, "info['success']", "no 'success' key"),
    (IgnoresSeed, "reset-seed determinism", "reset(seed=0) twice gave different first observations"),
    (NoRenderMode, "render() frames for videos", "render_mode"),
    (NoTask, "task_description", "per-task eval"),
    (BatchIgnoresSeed, "reset-seed determinism", "reset(seed=0) twice gave different observations"),
])
def test_what_only_degrades_results_is_a_warning(env_cls, check, words):
    found = results(env_cls)
    assert not any(r.severity == "error" for r in found), [(r.name, r.detail) for r in found if not r.passed]
    warned = {r.name: f"{r.detail} | fix: {r.fix}" for r in found if r.severity == "warning"}
    assert check in warned and words in warned[check]


def test_a_plain_gymnasium_class_without_a_success_key_is_warned():
    warned = rows(PlainNoSuccess, "warning")["info['success']"]
    assert "no 'is_success' or 'success' key" in warned and "success_key" in warned


# -- batched simulators ----------------------------------------------------------------------------


@pytest.mark.parametrize("env_cls, check, words", [
    (IgnoresAutoResetOff, "auto_reset=False: done envs stay done", "ran again (auto_reset=False ignored)"),
    (NoFinalObs, "chunk-step rules and final_obs (auto_reset on)", "final_obs is None"),
    (NaNFinalObs, "chunk-step rules and final_obs (auto_reset on)", "final_obs: states[0, 0] is inf"),
    (BatchBlackRender, "render() frames for videos", "black"),
    (BatchNeverEnds, "episode ends within max_episode_steps", "never ended an episode"),
])
def test_batched_mistakes_are_named(env_cls, check, words):
    found = rows(env_cls, "error")
    assert check in found, found
    assert words in found[check]


def test_chunk_rule_violations_of_a_batched_env_are_caught():
    found = rows(Sloppy, "error")["chunk-step rules and final_obs (auto_reset on)"]
    assert "rewards or done flags set on sub-steps that did not run" in found


# -- the command ---------------------------------------------------------------------------------------


def test_help_prints_check_env_s_own_help(capsys):
    from embodied.cli import main as cli_main

    with pytest.raises(SystemExit) as exit_:
        cli_main(["check-env", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: embodied check-env") and "--json" in out and "--obs-mode" in out


def test_json_output_for_ci(capsys):
    from embodied.cli import main as cli_main

    assert cli_main(["check-env", "Reach-v0", "--steps", "8", "--json"]) == 0
    rows_ = json.loads(capsys.readouterr().out)
    assert rows_ and all(set(r) == {"name", "passed", "detail", "fix", "severity"} for r in rows_)
    assert all(r["passed"] and r["severity"] == "ok" for r in rows_)

    assert cli_main(["check-env", env_id(CrashOnReset), "--json"]) == 1
    captured = capsys.readouterr()
    (row,) = json.loads(captured.out)
    assert row["passed"] is False and row["severity"] == "error" and "could not load the scene" in row["detail"]
    assert "Traceback" in captured.err and HERE in captured.err


def test_a_syntax_error_in_the_user_s_module_names_its_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "typo_sims.py").write_text("import gymnasium as gym\n\nclass ArmEnv(gym.Env)\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    row = only_row_id("typo_sims:ArmEnv")
    assert row.detail.startswith("SyntaxError") and "typo_sims.py:3" in row.detail
    assert "see the traceback above" in row.fix


def test_a_batched_env_with_a_misnamed_key_gets_a_suggestion():
    found = rows(MisnamedBatch, "error")
    assert "did you mean 'state' -> 'states'" in found["spaces"]

"""Simulators that fail to start, to reset or to render: constructor retries with backoff, a ``reset``
that raises through the restart path, a ``render()`` that hangs caught by the step watchdog."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import embodied.runs.train as runner
from embodied.config import ConfigError, load_config
from embodied.core.types import EnvError
from embodied.env_runtime.factory import make_vector_env

FLAKY = "tests.toy_envs:FlakyBuildEnv"
FAULTY = "tests.toy_envs:FaultyEnv"


def env_config(tmp_path: Path, fail_builds: int, *overrides: str):
    return load_config(None, [f"env.id={FLAKY}", "env.num_envs=2", "env.build_backoff_s=0.05",
                              f"env.kwargs={{counter: '{tmp_path / 'builds'}', fail_builds: {fail_builds}}}",
                              *overrides]).env


def test_a_constructor_that_fails_transiently_is_retried_with_backoff(tmp_path, capfd):
    venv = make_vector_env(env_config(tmp_path, fail_builds=2), 2, name="flaky")
    assert venv.num_envs == 2
    assert (tmp_path / "builds").read_text() == "4"  # env 0: two failures and a success; env 1: one
    err = capfd.readouterr().err
    assert "[env build] flaky env 0: the constructor raised RuntimeError: eglInitialize failed" in err
    assert "trying again in 0.05 s (1/2)" in err and "trying again in 0.1 s (2/2)" in err  # doubled
    venv.close()


def test_a_constructor_that_keeps_failing_is_named_with_its_attempts(tmp_path):
    with pytest.raises(EnvError) as info:
        make_vector_env(env_config(tmp_path, 100, "env.build_retries=1"), 2, name="flaky")
    message = str(info.value)
    assert "raised during construction" in message and "eglInitialize failed" in message
    assert "flaky env 0: the constructor failed on all 2 attempts (env.build_retries=1" in message
    assert (tmp_path / "builds").read_text() == "2"


def test_build_retry_fields_are_checked():
    with pytest.raises(ConfigError, match="env.build_retries: must be >= 0"):
        load_config(None, ["env.build_retries=-1"])
    with pytest.raises(ConfigError, match="env.build_backoff_s: must be a number of seconds >= 0"):
        load_config(None, ["env.build_backoff_s=-2"])


def fault_config(tmp_path: Path, marker: Path, *overrides: str):
    return load_config(None, [
        f"env.id={FAULTY}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "env.step_timeout_s=1", "env.preflight=false", "cluster.num_env_workers=2", "policy.type=mlp",
        "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=2",
        "algorithm.update_epochs=2", "runner.iterations=2", "runner.eval_every=0", "runner.eval_episodes=2",
        "runner.checkpoint_every=0", "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={tmp_path}", *overrides,
    ])


def test_a_reset_that_raises_goes_through_the_restart_path_and_the_epoch_is_redone_exactly(tmp_path, capfd):
    """The 3rd reset of an env (construction, then the auto-resets after each 6-step episode) is in
    iteration 2; the restarted run matches the one without the fault."""
    marker = tmp_path / "reset.marker"
    kwargs = f"env.kwargs={{fault: raise, fault_in: reset, fault_at: 3, marker: '{marker}'}}"
    faulted = runner.train(fault_config(tmp_path / "faulted", marker, kwargs))
    assert marker.exists()
    clean = runner.train(fault_config(tmp_path / "clean", marker, kwargs))
    err = capfd.readouterr().err
    assert "[restart 1; 1/3 within 20 iterations] iteration 2: env worker" in err and "raised during reset(seed=None)" in err
    assert [m["workers/restarts"] for m in faulted.history] == [0.0, 1.0]
    for mf, mc in zip(faulted.history, clean.history, strict=True):
        for key in ("env_steps", "env/episodes", "env/return", "train/loss"):
            assert mf[key] == mc[key], key


def test_a_render_that_hangs_is_caught_by_the_step_watchdog_and_the_eval_round_redone(tmp_path, capfd):
    """Eval videos render every sub-step of the recorded episodes; the 3rd render of an eval env hangs."""
    marker = tmp_path / "render.marker"
    cfg = fault_config(tmp_path, marker, "env.kwargs={}", "runner.iterations=1", "runner.eval_video=last",
                       "logger.video.size=16", "logger.video.max_videos=1",
                       f"eval_env.kwargs={{fault: hang, fault_in: render, fault_at: 3, marker: '{marker}'}}")
    result = runner.train(cfg)
    assert marker.exists()
    err = capfd.readouterr().err
    assert "[restart 1; 1/3 within 20 iterations] eval episodes from 0 at iteration 1: eval_env worker 0" in err
    assert "hung in render() at sub-step" in err
    assert result.history[-1]["eval/episodes"] == 2 and np.isfinite(result.history[-1]["eval/return"])
    assert list(result.run_dir.rglob("episode_000.mp4"))  # the redone round recorded its video

"""Logging: metrics.jsonl, console, TensorBoard and wandb sinks; an outage of any never stops training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embodied.config import LoggerConfig, load_config
from embodied.logger import WANDB_ID_FILE, MetricLogger, read_wandb_id
from embodied.runner import train
from embodied.video import write_mp4

COUNTING = "tests.toy_envs:CountingEnv"


def toy_config(tmp_path: Path, *overrides: str):
    """A seconds-long PPO run on CountingEnv with a small MLP."""
    return load_config(None, [
        f"env.id={COUNTING}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "runner.iterations=2", "runner.eval_every=1",
        "runner.eval_episodes=2", "logger.progress_bar=false", "runner.plot=false",
        f"experiment.output_dir={tmp_path}", *overrides,
    ])


class FakeRun:
    """Stands in for a wandb run; ``fail_on`` names the method that raises."""

    def __init__(self, fail_on: str = "", **init_kwargs) -> None:
        self.id = init_kwargs.get("id") or "fake"
        self.init_kwargs, self.fail_on, self.logged = init_kwargs, fail_on, []

    def log(self, data, step):
        if self.fail_on == "log":
            raise ConnectionError("wandb is down")
        self.logged.append((step, data))

    def finish(self):
        if self.fail_on == "finish":
            raise ConnectionError("wandb is down")


@pytest.fixture
def fake_wandb(monkeypatch):
    """wandb.init returning FakeRuns (kept in the returned list); ``fail_on`` set per test."""
    import wandb

    runs: list[FakeRun] = []

    def init(**kwargs):
        run = FakeRun(fail_on=getattr(init, "fail_on", ""), **kwargs)
        runs.append(run)
        return run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(wandb, "init", init)
    return init, runs


def test_a_wandb_that_raises_does_not_stop_training_and_each_drop_is_reported(tmp_path, fake_wandb, capsys):
    init, runs = fake_wandb
    init.fail_on = "log"
    cfg = toy_config(tmp_path, "logger.backends=[console, wandb]", "runner.iterations=3")
    result = train(cfg)
    assert len(result.history) == 3 and len(runs) == 1
    assert (result.run_dir / "metrics.jsonl").read_text().count("\n") == 3
    err = capsys.readouterr().err
    assert err.count("[logging] wandb log failed (dropped): ConnectionError('wandb is down')") == 3  # retried each time


def test_metrics_rows_that_fail_to_write_are_kept_and_retried_whole(tmp_path, monkeypatch, capsys):
    from embodied.logger import JsonlSink

    logger = MetricLogger(LoggerConfig(backends=[]), tmp_path, "run", {}, total=4)
    sink = logger.sinks[0]
    real, calls = JsonlSink._write, []

    def flaky(self, data):
        calls.append(data)
        if len(calls) == 2:  # the second write fails after writing half: nothing of it may stay
            real(self, data[: len(data) // 2])
            raise OSError(5, "Input/output error")
        real(self, data)

    monkeypatch.setattr(JsonlSink, "_write", flaky)
    for step in (1, 2, 3):
        logger.log({"x": float(step)}, step=step)
    assert sink in logger.sinks and logger.disk_full is None
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # row 2 written once, whole, with row 3
    assert "metrics.jsonl log failed (1 rows kept to retry)" in capsys.readouterr().err


def test_a_full_disk_stops_the_run_after_saving_a_checkpoint(tmp_path, monkeypatch):
    import errno

    from embodied.atomic import DiskFullError
    from embodied.checkpoint import find_checkpoint, load_checkpoint
    from embodied.logger import JsonlSink

    real = JsonlSink._write

    def fills_up(self, data):
        if b'"step": 3' in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, data)

    monkeypatch.setattr(JsonlSink, "_write", fills_up)
    with pytest.raises(DiskFullError, match="no space left on device: metrics.jsonl could not write in .*"
                                            "stopped after saving checkpoint .*iter_000003"):
        train(toy_config(tmp_path, "runner.iterations=10", "runner.checkpoint_every=0"))
    run_dir = next(tmp_path.iterdir())
    assert load_checkpoint(find_checkpoint(run_dir))["iteration"] == 3  # resumable from where it stopped


def test_a_checkpoint_that_cannot_be_written_for_lack_of_space_names_its_path(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    import torch

    from embodied.atomic import DiskFullError
    from embodied.checkpoint import save_checkpoint

    def save(obj, f):  # what torch.save says when the disk fills up mid-write
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 320 vs 214")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9, 0))
    target = tmp_path / "checkpoints" / "iter_000001"
    with pytest.raises(DiskFullError, match=f"no space left on device writing checkpoint {target} \\(0 MB free\\)"):
        save_checkpoint(target, {"iteration": 1})
    assert list((tmp_path / "checkpoints").iterdir()) == []  # no half-written folder


def test_a_wandb_that_cannot_start_does_not_stop_training(tmp_path, monkeypatch):
    import wandb

    def init(**kwargs):
        raise RuntimeError("cannot reach wandb")

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setattr(wandb, "init", init)
    with pytest.warns(UserWarning, match="wandb logging could not start.*cannot reach wandb"):
        result = train(toy_config(tmp_path, "logger.backends=[wandb]"))
    assert len(result.history) == 2


def test_wandb_gets_metrics_videos_and_a_stored_run_id(tmp_path, fake_wandb):
    init, runs = fake_wandb
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {"a": 1}, total=3)
    video = write_mp4(tmp_path / "v.mp4", [np.full((16, 16, 3), 99, np.uint8)] * 3, fps=5)
    logger.log({"x": 1.0}, step=1, videos={"eval/video/iter_000001/v": video})
    logger.close()
    (run,) = runs
    assert run.init_kwargs["resume"] == "allow" and run.init_kwargs["mode"] == "offline"
    assert read_wandb_id(tmp_path) == run.id == run.init_kwargs["id"]
    assert run.logged[0] == (1, {"x": 1.0})
    step, media = run.logged[1]
    assert step == 1 and type(media["eval/video/iter_000001/v"]).__name__ == "Video"
    # A logger given that id continues the same run.
    MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=3, start_step=1,
                 wandb_id=run.id).close()
    assert runs[1].init_kwargs["id"] == run.id


def test_real_wandb_offline_run_logs_a_video(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = MetricLogger(LoggerConfig(backends=["wandb"], project="test"), tmp_path, "run", {}, total=2)
    assert len(logger.sinks) == 2, "wandb did not start"
    video = write_mp4(tmp_path / "clip.mp4", [np.full((16, 16, 3), 99, np.uint8)] * 4, fps=5)
    logger.log({"eval/success_rate": 0.5}, step=1, videos={"eval/video/clip": video})
    run_id = logger.wandb_id
    logger.close()
    assert (tmp_path / WANDB_ID_FILE).read_text().strip() == run_id
    assert list(tmp_path.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert list(tmp_path.glob("wandb/offline-run-*/files/media/videos/**/*.mp4"))


def test_tensorboard_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricLogger(LoggerConfig(backends=["tensorboard"]), tmp_path, "run", {}, total=2)
    logger.log({"train/value_loss": 2.5, "eval/success_rate": float("nan")}, step=1)
    logger.log({"train/value_loss": 1.5}, step=2)
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Tags()["scalars"] == ["train/value_loss"]  # NaN is left out
    assert [(e.step, e.value) for e in events.Scalars("train/value_loss")] == [(1, 2.5), (2, 1.5)]


def test_console_bar_shows_eta_rate_and_success(tmp_path, capsys):
    logger = MetricLogger(LoggerConfig(backends=["console"]), tmp_path, "run", {}, total=4)
    logger.log({"env/success_rate": 0.25, "env_steps_per_s": 1234.0}, step=1)
    logger.log({"env/success_rate": 0.5, "env_steps_per_s": 1500.0, "eval/success_rate": 0.75,
                "eval/success_ci_low": 0.4, "eval/success_ci_high": 0.9, "eval/episodes": 8.0}, step=2)
    logger.close()
    out = capsys.readouterr().out
    assert "2/4" in out and "<" in out  # progress and ETA (elapsed<remaining)
    assert "succ=0.5" in out and "sps=1.5e+03" in out
    assert "[eval @ it 2] success 0.75 [0.40, 0.90]" in out and "(8 episodes)" in out


def test_a_sink_failing_at_close_is_reported_not_raised(tmp_path, fake_wandb, capsys):
    init, runs = fake_wandb
    init.fail_on = "finish"
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=2)
    logger.close()
    assert "[logging] wandb close failed" in capsys.readouterr().err


def test_resumed_metrics_jsonl_drops_lines_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in range(1, 6)))
    logger = MetricLogger(LoggerConfig(backends=[]), tmp_path, "run", {}, total=8, start_step=3)
    logger.log({"x": 40}, step=4)
    logger.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]


def test_a_torn_last_line_is_dropped_on_resume_and_metrics_go_on(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in range(1, 4)) + '{"step": 4, "x"')
    with pytest.warns(UserWarning, match=r"metrics.jsonl:4: dropping a line that is not JSON"):
        logger = MetricLogger(LoggerConfig(backends=[]), tmp_path, "run", {}, total=8, start_step=3)
    logger.log({"x": 40}, step=4)
    logger.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]


def test_metrics_rows_carry_wall_clock_time(tmp_path):
    import time

    before = time.time()
    logger = MetricLogger(LoggerConfig(backends=[]), tmp_path, "run", {}, total=2)
    logger.log({"x": 1.0}, step=1)
    logger.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert before - 1 <= row["time"] <= time.time() + 1 and row["x"] == 1.0


def test_real_wandb_is_quiet_at_the_end_unless_asked(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    (tmp_path / "quiet").mkdir()
    logger = MetricLogger(LoggerConfig(backends=["wandb"], project="test"), tmp_path / "quiet", "run", {}, total=2)
    logger.log({"train/loss": 0.5}, step=1)
    logger.close()
    quiet = capfd.readouterr()
    assert "Run summary" not in quiet.out + quiet.err and "wandb sync" not in quiet.out + quiet.err
    (tmp_path / "loud").mkdir()
    logger = MetricLogger(LoggerConfig(backends=["wandb"], project="test", wandb_summary=True), tmp_path / "loud",
                          "run", {}, total=2)
    logger.log({"train/loss": 0.5}, step=1)
    logger.close()
    loud = capfd.readouterr()
    assert "wandb" in loud.out + loud.err

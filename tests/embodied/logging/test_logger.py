"""Logging: metrics.jsonl, console, TensorBoard and wandb sinks; an outage of any never stops training."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from embodied.config import LoggerConfig, load_config
from embodied.logging.logger import WANDB_ID_FILE, MetricLogger, read_wandb_id
from embodied.logging.video import write_mp4
from embodied.runs.train import train

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


def test_a_wandb_that_raises_does_not_stop_training_and_each_drop_is_reported(tmp_path, fake_wandb, capfd):
    fake_wandb.fail_on("log")
    cfg = toy_config(tmp_path, "logger.backends=[console, wandb]", "runner.iterations=3")
    result = train(cfg)
    assert len(result.history) == 3 and len(fake_wandb.runs()) == 1 and fake_wandb.runs()[0].finished
    assert (result.run_dir / "metrics.jsonl").read_text().count("\n") == 3
    err = capfd.readouterr().err  # printed by wandb's own process
    assert err.count("[logging] wandb log failed (dropped): ConnectionError('wandb is down')") == 3  # retried each time


def test_metrics_rows_that_fail_to_write_are_kept_and_retried_whole(tmp_path, monkeypatch, capsys):
    from embodied.logging.logger import JsonlSink

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

    from embodied.core.atomic import DiskFullError
    from embodied.checkpoint.store import find_checkpoint, load_checkpoint
    from embodied.logging.logger import JsonlSink

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

    from embodied.core.atomic import DiskFullError
    from embodied.checkpoint.store import save_checkpoint

    def save(obj, f):  # what torch.save says when the disk fills up mid-write
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 320 vs 214")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9, 0))
    target = tmp_path / "checkpoints" / "iter_000001"
    with pytest.raises(DiskFullError, match=f"no space left on device writing checkpoint {target} \\(0 MB free\\)"):
        save_checkpoint(target, {"iteration": 1})
    assert list((tmp_path / "checkpoints").iterdir()) == []  # no half-written folder


def test_a_wandb_that_cannot_start_does_not_stop_training(tmp_path, fake_wandb, monkeypatch):
    fake_wandb.fail_on("init")
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.warns(UserWarning, match="wandb logging could not start.*cannot reach wandb"):
        result = train(toy_config(tmp_path, "logger.backends=[wandb]"))
    assert len(result.history) == 2


def test_a_wandb_process_that_dies_switches_the_sink_off_and_training_goes_on(tmp_path, fake_wandb):
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=3)
    (sink,) = [s for s in logger.sinks if s.name == "wandb"]
    logger.log({"x": 1.0}, step=1)
    deadline = time.monotonic() + 60
    while not (fake_wandb.runs() and fake_wandb.runs()[0].logged):  # started, and took the first row
        assert time.monotonic() < deadline, "the wandb process never logged"
        time.sleep(0.05)
    sink.process.kill()
    sink.process.wait()
    with pytest.warns(UserWarning, match=r"wandb logging stopped, switching it off: its process exited with code -9"):
        logger.log({"x": 2.0}, step=2)
    assert logger.wandb_id is None
    logger.log({"x": 3.0}, step=3)  # no more warnings, nothing sent
    logger.close()
    assert [json.loads(line)["x"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_wandb_gets_metrics_videos_and_a_stored_run_id(tmp_path, fake_wandb):
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {"a": 1}, total=3)
    video = write_mp4(tmp_path / "v.mp4", [np.full((16, 16, 3), 99, np.uint8)] * 3, fps=5)
    logger.log({"x": 1.0}, step=1, videos={"eval/video/iter_000001/v": video})
    logger.close()
    (run,) = fake_wandb.runs()
    assert run.init_kwargs["resume"] == "allow" and run.init_kwargs["mode"] == "offline"
    assert run.init_kwargs["config"] == {"a": 1} and run.init_kwargs["settings"] == {"quiet": True, "silent": True}
    assert read_wandb_id(tmp_path) == run.init_kwargs["id"] and run.finished
    assert run.logged == [(1, {"x": 1.0}), (1, {"eval/video/iter_000001/v": {"Video": str(video)}})]
    # A logger given that id continues the same run.
    MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=3, start_step=1,
                 wandb_id=run.init_kwargs["id"]).close()
    assert fake_wandb.runs()[1].init_kwargs["id"] == run.init_kwargs["id"]


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


def test_a_sink_failing_at_close_is_reported_not_raised(tmp_path, fake_wandb, capfd):
    fake_wandb.fail_on("finish")
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=2)
    logger.close()
    assert "[logging] wandb close failed: ConnectionError('wandb is down')" in capfd.readouterr().err


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


def test_the_prestarted_wandb_process_is_the_one_the_run_uses(tmp_path, fake_wandb):
    from embodied.logging import wandb_process
    from embodied.logging.logger import prestart_wandb

    prestart_wandb(LoggerConfig(backends=["console"]))
    assert wandb_process._prestarted == []  # no wandb sink, no process
    prestart_wandb(LoggerConfig(backends=["wandb"]))
    (prestarted,) = wandb_process._prestarted
    logger = MetricLogger(LoggerConfig(backends=["wandb"]), tmp_path, "run", {}, total=1)
    (sink,) = [s for s in logger.sinks if s.name == "wandb"]
    assert sink.process is prestarted.popen and wandb_process._prestarted == []
    logger.log({"x": 1.0}, step=1)
    logger.close()
    assert fake_wandb.runs()[0].logged == [(1, {"x": 1.0})]


def test_a_prestarted_wandb_process_whose_run_never_starts_exits_quietly(fake_wandb, capfd):
    from embodied.logging import wandb_process

    wandb_process.prestart()
    (process,) = wandb_process._prestarted
    wandb_process._prestarted.clear()
    process.popen.stdin.close()  # what the CLI's exit does when the config or the preflight is refused
    assert process.popen.wait(timeout=60) == 0
    assert fake_wandb.runs() == [] and capfd.readouterr().err == ""


def test_loading_a_config_imports_no_torch():
    """So that `embodied train` starts wandb's process before torch's second-long import (embodied.cli)."""
    import subprocess
    import sys

    code = ("import sys; from embodied.config import load_config; from embodied.logging.logger import prestart_wandb; "
            "load_config('configs/pick_color_tinyvla_flow_ppo.yaml', []); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[3]).stdout
    assert out.strip() == "[]"

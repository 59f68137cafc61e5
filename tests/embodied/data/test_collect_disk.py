"""Disk and datasets: a full disk leaves no half-written dataset and names it; a killed collect runs again."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.core.atomic import DiskFullError, atomic_dir
from embodied.data import DemoEpisode, Meta, read_meta
from embodied.runs.collect import collect

REACH = ["env.id=Reach-v0", "env.num_envs=2", "policy.action_chunk=4", "env.max_episode_steps=30"]


def full_disk(path: object) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def dead_pid() -> int:
    """The id of a process that has exited (so no process runs under it)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_full_disk_writing_embodieds_format_leaves_nothing_and_names_the_path(tmp_path, monkeypatch, capsys):
    from datasets.arrow_writer import ArrowWriter

    def fills_the_disk(self, table, *args, **kwargs):
        calls.append(self._path)
        with open(self._path, "wb") as f:
            f.write(b"\0" * 4096)  # part of the rows, then the disk is full
        raise full_disk(self._path)

    calls: list[str] = []
    monkeypatch.setattr(ArrowWriter, "write_table", fills_the_disk)
    out = tmp_path / "reach"
    with pytest.raises(DiskFullError) as caught:
        collect(load_config(None, REACH), episodes=2, out=out)
    message = str(caught.value)
    assert str(out) in message and "MiB free" in message and "MiB needed" in message
    assert calls and list(tmp_path.iterdir()) == []  # neither the dataset nor its temp folder
    # From the CLI: exit 1, the path on stderr, no traceback.
    assert main(["collect", "configs/reach_mlp_ppo.yaml", *REACH[1:], "--episodes", "2", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "\nerror: no space left on device writing dataset" in err and str(out) in err
    assert not out.exists() and not list(tmp_path.glob("reach.*"))


def test_a_full_disk_writing_lerobot_data_leaves_nothing_and_names_the_path(tmp_path, monkeypatch, capsys):
    import pyarrow.parquet as pq

    original = pq.ParquetWriter.write_table

    def fills_the_disk(self, table, *args, **kwargs):
        original(self, table, *args, **kwargs)  # the first episode's rows, then the disk is full
        raise full_disk("episode 1")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fills_the_disk)
    out = tmp_path / "reach"
    assert main(["collect", "configs/reach_mlp_ppo.yaml", *REACH[1:], "--episodes", "2", "--out", str(out),
                 "--format", "lerobot"]) == 1
    err = capsys.readouterr().err
    assert "\nerror: no space left on device writing LeRobot dataset" in err and str(out) in err
    assert "MiB free" in err and list(tmp_path.iterdir()) == []


def test_a_full_disk_in_the_video_encoder_leaves_nothing_and_names_the_path(tmp_path, monkeypatch):
    import embodied.data.lerobot.writer as writer

    original, frames = writer.VideoEncoder.add, {"n": 0}

    def fills_the_disk(self, image):
        original(self, image)
        frames["n"] += 1
        if frames["n"] == 25:  # into the second episode: the first one's packets are in the mp4
            raise full_disk(self.path)

    monkeypatch.setattr(writer.VideoEncoder, "add", fills_the_disk)
    rng = np.random.default_rng(0)
    episodes = [DemoEpisode(seed=k, task="t", success=True,
                            obs={"main_images": rng.integers(0, 255, (20, 16, 16, 3), dtype=np.uint8)},
                            actions=np.zeros((20, 1, 2), np.float32), executed=np.ones((20, 1), bool),
                            rewards=np.zeros((20, 1), np.float32)) for k in range(2)]
    meta = Meta(env_id="Toy-v0", obs_mode="rgb", max_episode_steps=20, action_chunk=1, action_dim=2,
                action_low=[-1.0, -1.0], action_high=[1.0, 1.0], state_dim=0, image_shapes={"main_images": [16, 16, 3]},
                episodes=2, successes=2, episodes_attempted=2, successes_attempted=2, rows=40, expert="none", seed=0,
                tasks=["t"])
    with pytest.raises(DiskFullError, match=f"writing LeRobot dataset {tmp_path / 'd'} "):
        writer.write_lerobot(tmp_path / "d", episodes, meta, fps=10)
    assert frames["n"] == 25 and list(tmp_path.iterdir()) == []


def test_a_collect_over_the_temp_folders_of_killed_ones_removes_them_and_writes(tmp_path, capsys):
    out = tmp_path / "reach"
    gone = dead_pid()
    for name in (f"reach.tmp{gone}", f"reach.old.tmp{gone}"):  # as a collect killed mid-write leaves them
        (tmp_path / name).mkdir()
        (tmp_path / name / "data-00000-of-00001.arrow").write_bytes(b"\0" * 100)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (tmp_path / f"reach.tmp{sleeper.pid}").mkdir()  # another collect's, still being written: left alone
        (tmp_path / "reached.tmp1").mkdir()  # another folder's: left alone
        assert main(["collect", "configs/reach_mlp_ppo.yaml", *REACH[1:], "--episodes", "2", "--out", str(out)]) == 0
    finally:
        sleeper.kill()
        sleeper.wait()
    printed = capsys.readouterr().out
    assert f"removed {tmp_path / f'reach.tmp{gone}'}: the unfinished write of a collect that was killed" in printed
    assert f"removed {tmp_path / f'reach.old.tmp{gone}'}" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reach", f"reach.tmp{sleeper.pid}", "reached.tmp1"]
    assert read_meta(out).episodes == 2


KILLED_MID_WRITE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from embodied.config import load_config
    from embodied.runs.collect import collect
    from embodied.data.format import DatasetWriter

    def slow(self, meta):
        self.flush()
        Path(sys.argv[2]).touch()  # the rows are written, meta.json is not: now kill me
        time.sleep(600)

    DatasetWriter.finish = slow
    collect(load_config(None, sys.argv[3:]), episodes=2, out=Path(sys.argv[1]))
""")


def test_a_collect_killed_mid_write_runs_again_over_the_same_out(tmp_path):
    out, ready = tmp_path / "reach", tmp_path.parent / f"{tmp_path.name}.ready"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(out), str(ready), *REACH], env=env)
    try:
        deadline = time.monotonic() + 300
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), f"the child collect never reached its write (exit code {child.poll()})"
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        child.kill()
        ready.unlink(missing_ok=True)
    assert [p.name for p in tmp_path.iterdir()] == [f"reach.tmp{child.pid}"]  # half a dataset, under a temp name
    with pytest.raises(FileNotFoundError):
        read_meta(tmp_path / f"reach.tmp{child.pid}")  # which no reader takes for a dataset
    report = collect(load_config(None, REACH), episodes=2, out=out)
    assert report.removed == [tmp_path / f"reach.tmp{child.pid}"] and not report.replaced
    assert [p.name for p in tmp_path.iterdir()] == ["reach"] and read_meta(out).episodes == 2


def test_an_existing_out_is_replaced_only_with_overwrite_and_only_when_it_is_a_dataset(tmp_path, capsys):
    cfg = load_config(None, REACH)
    (tmp_path / "empty").mkdir()
    assert not collect(cfg, episodes=1, out=tmp_path / "empty").replaced  # an empty folder is written
    base = ["collect", "configs/reach_mlp_ppo.yaml", *REACH[1:], "--episodes", "2", "--out", str(tmp_path / "empty")]
    assert main(base) == 2
    assert "exists and holds a dataset (arrow); choose a new folder, or pass --overwrite" in capsys.readouterr().err
    assert read_meta(tmp_path / "empty").episodes == 1  # untouched
    assert main([*base, "--overwrite"]) == 0
    assert "replaced the dataset that was in" in capsys.readouterr().out
    assert read_meta(tmp_path / "empty").episodes == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not a dataset"):
        collect(cfg, episodes=1, out=tmp_path / "notes", overwrite=True)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_a_failed_replacement_keeps_the_old_folder_whole(tmp_path):
    target = tmp_path / "d"
    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(OSError), atomic_dir(target) as tmp:
        (tmp / "a").write_text("new, half")
        raise full_disk(tmp)
    assert (target / "a").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["d"]
    with atomic_dir(target) as tmp:
        (tmp / "b").write_text("new")
    assert [p.name for p in target.iterdir()] == ["b"] and [p.name for p in tmp_path.iterdir()] == ["d"]

"""Eval videos: frames recorded with the terminal one, mp4s that decode, a writer that never leaves a broken file."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
from tests.toy_envs import CountingEnv

from embodied.config.schema import VideoConfig
from embodied.core.types import EpisodeFrames
from embodied.envs.chunked import ChunkedVectorEnv
from embodied.logging.video import VideoWriter, episode_frames, tile, write_mp4


def decode(path: Path) -> np.ndarray:
    """All frames of an mp4, uint8 [T, H, W, 3]."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    return np.stack([np.frombuffer(f, np.uint8).reshape(height, width, 3) for f in reader])


def ramp(num_envs: int, chunk: int) -> np.ndarray:
    return np.ones((num_envs, chunk, 2), dtype=np.float32)


def fake_episode(length: int, env_index: int = 0, task: str = "count") -> EpisodeFrames:
    """``length`` sub-steps plus the reset frame, each a distinct bright colour."""
    frames = [np.full((16, 16, 3), (40 + 8 * t, 200, 120), dtype=np.uint8) for t in range(length + 1)]
    return EpisodeFrames(env_index, task, frames, [0.0] + [1.0] * length, [False] * length + [True])


# -- recording in the chunked vector env ------------------------------------------------------


def test_recording_keeps_the_terminal_frame_before_auto_reset():
    venv = ChunkedVectorEnv([partial(CountingEnv, terminate_at=3), partial(CountingEnv, terminate_at=5)],
                            auto_reset=True)
    venv.reset(seed=0)
    venv.record([0])
    venv.chunk_step(ramp(2, 2))
    assert venv.take_recordings() == []  # nothing finished yet
    out = venv.chunk_step(ramp(2, 2))  # env 0 terminates at t=3 and is reset
    assert out.dones[0]
    (rec,) = venv.take_recordings()
    assert rec.env_index == 0 and rec.task == "count"
    # Frame t shows the state after sub-step t (CountingEnv paints 20 * t): the reset, then 1..3.
    assert [int(f[0, 0, 0]) for f in rec.frames] == [0, 20, 40, 60]
    assert rec.rewards == [0.0, 1.0, 1.0, 1.0] and len(rec.successes) == 4
    # With auto_reset the next episode is recorded from its own first frame.
    venv.chunk_step(ramp(2, 3))
    (second,) = venv.take_recordings()
    assert [int(f[0, 0, 0]) for f in second.frames] == [0, 20, 40, 60]


def test_recording_without_auto_reset_ends_with_the_episode():
    venv = ChunkedVectorEnv([partial(CountingEnv, truncate_at=4)] * 2, auto_reset=False)
    venv.reset(seed=0)
    venv.record([0, 1])
    for _ in range(4):
        venv.chunk_step(ramp(2, 3))
    recs = venv.take_recordings()
    assert sorted(r.env_index for r in recs) == [0, 1]
    assert all(len(r.frames) == 5 and int(r.frames[-1][0, 0, 0]) == 80 for r in recs)
    venv.record(())
    venv.reset(seed=0)
    venv.chunk_step(ramp(2, 4))
    assert venv.take_recordings() == []  # recording stopped


class BrokenRenderEnv(CountingEnv):
    def render(self):
        raise RuntimeError("no GL context")


def test_a_renderer_that_raises_stops_recording_not_stepping():
    venv = ChunkedVectorEnv([partial(BrokenRenderEnv, terminate_at=2)])
    venv.reset(seed=0)
    venv.record([0])
    out = venv.chunk_step(ramp(1, 3))
    assert out.executed[0, :2].all() and out.dones[0] and len(out.episodes) == 1
    assert "no GL context" in venv.recording_error
    assert venv.take_recordings() == []


def test_episode_stats_carry_the_task():
    venv = ChunkedVectorEnv([partial(CountingEnv, terminate_at=1)])
    venv.reset(seed=0)
    assert venv.chunk_step(ramp(1, 1)).episodes[0].task == "count"


# -- frames, tiling and encoding ----------------------------------------------------------------


def test_episode_frames_resize_and_overlay():
    rec = fake_episode(3)
    plain = episode_frames(rec, VideoConfig(size=32, overlay=False))
    assert len(plain) == 4 and plain[0].shape == (32, 32, 3)
    drawn = episode_frames(rec, VideoConfig(size=64, overlay=True))
    resized = episode_frames(rec, VideoConfig(size=64, overlay=False))
    assert all((a != b).any() for a, b in zip(drawn, resized)), "overlay drew nothing"


def test_tile_holds_finished_episodes_on_their_last_frame():
    a = [np.full((4, 4, 3), v, np.uint8) for v in (10, 20)]
    b = [np.full((4, 4, 3), v, np.uint8) for v in (30, 40, 50)]
    c = [np.full((4, 4, 3), 60, np.uint8)]
    grid = tile([a, b, c])
    assert len(grid) == 3 and grid[0].shape == (8, 8, 3)  # 2 x 2, one tile empty
    assert grid[2][0, 0, 0] == 20 and grid[2][0, 4, 0] == 50 and grid[2][4, 0, 0] == 60 and grid[2][4, 4, 0] == 0


def test_write_mp4_decodes_to_the_frames_written(tmp_path):
    frames = [np.full((32, 48, 3), (30 + 10 * t, 180, 90), np.uint8) for t in range(7)]
    path = write_mp4(tmp_path / "a.mp4", frames, fps=10)
    video = decode(path)
    assert video.shape == (7, 32, 48, 3)
    assert video.mean() > 50  # not black
    assert abs(int(video[-1, 0, 0, 0]) - 90) < 12  # the last frame is the last one written
    assert list(tmp_path.iterdir()) == [path]  # no temp file left


def test_writer_encodes_episodes_and_their_grid_off_thread(tmp_path):
    writer = VideoWriter()
    episodes = [fake_episode(4, 0), fake_episode(6, 1), fake_episode(2, 2)]
    cfg = VideoConfig(size=32, fps=10)
    writer.submit(tmp_path, episodes, ["e0.mp4", "e1.mp4", "e2.mp4"], "grid.mp4", cfg)
    writer.flush()
    written = sorted(p.name for p in writer.take_written())
    assert written == ["e0.mp4", "e1.mp4", "e2.mp4", "grid.mp4"]
    assert writer.take_written() == [] and writer.take_errors() == []
    for name, length in (("e0.mp4", 5), ("e1.mp4", 7), ("e2.mp4", 3)):
        video = decode(tmp_path / name)
        assert video.shape == (length, 32, 32, 3) and video.mean() > 50
    grid = decode(tmp_path / "grid.mp4")
    assert grid.shape == (7, 64, 64, 3)
    writer.close()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_failed_video_is_reported_and_leaves_no_file(tmp_path):
    writer = VideoWriter()
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    writer.submit(blocker, [fake_episode(2)], ["e.mp4"], None, VideoConfig(size=32))
    writer.submit(tmp_path / "ok", [fake_episode(2)], ["e.mp4"], None, VideoConfig(size=32))
    writer.close()  # close flushes what is queued
    (error,) = writer.take_errors()
    assert "not_a_dir" in error
    assert [p.name for p in writer.take_written()] == ["e.mp4"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["e.mp4", "not_a_dir", "ok"]


def test_a_failure_mid_file_leaves_no_mp4(tmp_path):
    frames = [np.zeros((16, 16, 3), np.uint8)] * 3 + [np.zeros((8, 8, 3), np.uint8)]  # wrong size mid-way
    with pytest.raises(ValueError, match="frame 3 has shape"):
        write_mp4(tmp_path / "broken.mp4", frames, fps=10)
    assert list(tmp_path.iterdir()) == []


def test_long_instructions_wrap_into_lines_that_fit():
    from embodied.logging.video import wrap_text

    width = len  # one unit per character
    lines = wrap_text("pick up the red cube and place it at the green target", width, 20)
    assert lines == ["pick up the red cube", "and place it at the", "green target"]
    assert all(len(line) <= 20 for line in lines)
    many = wrap_text(" ".join(["word"] * 40), width, 12, max_lines=2)
    assert len(many) == 2 and many[-1].endswith("...") and len(many[-1]) <= 12
    assert wrap_text("", width, 10) == []


def test_a_batched_simulator_records_eval_videos_from_its_render(tmp_path):
    """No record() needed: one frame after reset and one per chunk step, the terminal frame last."""
    from embodied.config import load_config
    from embodied.backends import LocalBackend
    from embodied.workers.evaluator import Evaluator

    cfg = load_config(None, ["env.id=tests.toy_batched:PointMassBatch", "env.num_envs=3", "env.max_episode_steps=6",
                             "policy.action_chunk=2", "policy.hidden_sizes=[8]", "logger.video.size=32",
                             "logger.video.max_videos=2", "logger.video.overlay=false"])
    backend = LocalBackend()
    try:
        evaluator = Evaluator.start(cfg, backend, cfg.logger.video)
        episodes = evaluator.run(3, str(tmp_path))
        report = evaluator.take_videos(wait=True)
        evaluator.close()
    finally:
        backend.shutdown()
    assert not report.errors, report.errors
    names = sorted(Path(p).name for p in report.paths)
    assert names == ["episode_000.mp4", "episode_001.mp4", "grid_000-001.mp4"]
    for k in (0, 1):
        frames = decode(tmp_path / f"episode_{k:03d}.mp4")
        chunks = -(-episodes[k].length // 2)  # chunk steps the episode ran
        assert len(frames) == 1 + chunks
        assert frames.std() > 0  # not a blank video

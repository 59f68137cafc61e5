"""``embodied collect --format lerobot``: a valid v3.0 folder that SFT reads as it reads the Arrow dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.data import DemoEpisode, ReadOptions, open_demonstrations, read_meta
from embodied.data.lerobot import FileLimits, LeRobotDemos, write_lerobot
from embodied.runs.collect import collect

PICK_COLOR = ["env.id=PickColor-v0", "env.obs_mode=state+rgb", "env.num_envs=2", "env.max_episode_steps=60",
              "policy.action_chunk=4", "experiment.seed=7"]
# Camera frames come back through AV1 at CRF 30 (LeRobot's default), lossy: per image the mean absolute
# difference from the rendered frame stays under 10 grey levels of 255 and the PSNR above 24 dB
# (measured over 120 such 64 x 64 frames: 4.3 on average, 6.6 at worst; 29.4 dB, 26.4 dB at worst).
MAX_MEAN_ABS, MIN_PSNR = 10.0, 24.0


@pytest.fixture(scope="module")
def both_formats(tmp_path_factory) -> tuple[Path, Path]:
    """The same 2 PickColor episodes (same seed), collected into each format."""
    root = tmp_path_factory.mktemp("collect")
    cfg = load_config(None, PICK_COLOR)
    collect(cfg, episodes=2, out=root / "arrow")
    report = collect(cfg, episodes=2, out=root / "lerobot", data_format="lerobot")
    assert report.data_format == "lerobot" and report.meta.action_chunk == 1
    return root / "arrow", root / "lerobot"


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b) ** 2).mean())
    return 10 * np.log10(255**2 / max(mse, 1e-12))


def test_sft_reads_the_same_states_actions_and_tasks_from_both_formats_and_images_within_codec_tolerance(both_formats):
    arrow, lerobot = (open_demonstrations(p, ReadOptions(action_chunk=4)) for p in both_formats)
    assert type(lerobot).__name__ == "LeRobotDemos" and lerobot.fps == 20  # the env's control frequency
    frames = int(sum(arrow[i].executed.sum() for i in range(len(arrow))))
    assert len(lerobot) == frames  # a row per control step
    for i in range(len(arrow)):
        episode, step = int(arrow.episode_indices[i]), int(arrow.steps[i])
        j = int(np.flatnonzero((lerobot.episode_indices == episode) & (lerobot.steps == 4 * step))[0])
        a, b = arrow[i], lerobot[j]  # the chunk boundary: chunk step `step` is frame 4 step
        np.testing.assert_array_equal(a.obs["states"], b.obs["states"])
        np.testing.assert_array_equal(a.actions.numpy(), b.actions.numpy())  # the chunk, built at load time
        np.testing.assert_array_equal(a.executed.numpy(), b.executed.numpy())  # padded at the episode's end
        assert a.obs["task_descriptions"] == b.obs["task_descriptions"]
        for key in ("main_images", "wrist_images"):
            assert b.obs[key].dtype == np.uint8 and b.obs[key].shape == a.obs[key].shape
            assert np.abs(a.obs[key].astype(int) - b.obs[key]).mean() <= MAX_MEAN_ABS
            assert psnr(a.obs[key], b.obs[key]) >= MIN_PSNR


def test_the_folder_follows_lerobots_v3_layout(both_formats):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = both_formats[1]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 20 and info["total_episodes"] == 2
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    features = info["features"]
    assert list(features) == ["observation.state", "observation.images.image", "observation.images.wrist_image",
                              "action", "next.reward", "next.done", "timestamp", "frame_index", "episode_index",
                              "index", "task_index"]
    camera = features["observation.images.image"]
    assert camera["dtype"] == "video" and camera["shape"] == [64, 64, 3]
    assert camera["names"] == ["height", "width", "channels"]
    assert {k: camera["info"][k] for k in ("video.codec", "video.pix_fmt", "video.g", "video.fps")} == {
        "video.codec": "av1", "video.pix_fmt": "yuv420p", "video.g": 2, "video.fps": 20}
    episodes = pd.read_parquet(root / "meta/episodes/chunk-000/file-000.parquet")
    for column in ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index", "videos/observation.images.image/from_timestamp",
                   "videos/observation.images.wrist_image/to_timestamp", "meta/episodes/chunk_index",
                   "stats/action/mean"):
        assert column in episodes.columns, column
    assert episodes["dataset_to_index"].iloc[-1] == info["total_frames"]
    assert episodes["videos/observation.images.image/from_timestamp"].iloc[1] == episodes["length"].iloc[0] / 20
    tasks = pd.read_parquet(root / "meta/tasks.parquet")  # as LeRobot's load_tasks reads it
    assert tasks.index.name == "task" and list(tasks["task_index"]) == list(range(len(tasks)))
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    state = data.schema.field("observation.state").type  # datasets' List(Value("float32"), length=16)
    assert pa.types.is_fixed_size_list(state) and state.list_size == 16 and state.value_type == pa.float32()
    assert b"huggingface" in data.schema.metadata and data.num_rows == info["total_frames"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert set(stats) == set(features)
    assert np.array(stats["observation.images.image"]["mean"]).shape == (3, 1, 1)
    assert np.array(stats["action"]["q99"]).shape == (4,) and stats["index"]["count"] == [info["total_frames"]]
    provenance = json.loads((root / "meta/embodied.json").read_text())
    assert provenance["meta"]["env_id"] == "PickColor-v0" and provenance["episode_seeds"] == [7, 8]


def test_full_files_roll_over_to_new_ones_that_read_back(tmp_path):
    rng = np.random.default_rng(0)
    episodes = [DemoEpisode(seed=k, task=f"task {k % 2}", success=True,
                            obs={"main_images": rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8)},
                            actions=rng.normal(size=(n, 1, 2)).astype(np.float32), executed=np.ones((n, 1), bool),
                            rewards=np.zeros((n, 1), np.float32)) for k, n in enumerate([30, 40, 35])]
    meta = read_meta_like(episodes)
    write_lerobot(tmp_path / "d", episodes, meta, fps=10, limits=FileLimits(data_mb=1e-6, video_mb=1e-6))
    assert len(list((tmp_path / "d/data/chunk-000").iterdir())) == 3  # a file per episode at these limits
    # The encoder holds frames back, so a video file fills up an episode or two late.
    assert len(list((tmp_path / "d/videos/observation.images.image/chunk-000").iterdir())) >= 2
    data = LeRobotDemos(tmp_path / "d", action_chunk=1)
    assert len(data) == 105 and data.obs_keys == ["main_images"]
    flat = np.concatenate([ep.actions[:, 0] for ep in episodes])
    np.testing.assert_array_equal(np.stack([data[i].actions[0].numpy() for i in range(len(data))]), flat)
    assert all(data[i].obs["main_images"].shape == (16, 16, 3) for i in (0, 29, 30, 104))
    with pytest.raises(ValueError, match="record the episodes with action chunk 1, not 3"):
        write_lerobot(tmp_path / "e", [DemoEpisode(0, "t", True, {}, np.zeros((2, 3, 2), np.float32),
                                                   np.ones((2, 3), bool), np.zeros((2, 3), np.float32))], meta, 10)


def read_meta_like(episodes: list[DemoEpisode]):
    from embodied.data import Meta

    return Meta(env_id="Toy-v0", obs_mode="rgb", max_episode_steps=10, action_chunk=1, action_dim=2,
                action_low=[-1.0, -1.0], action_high=[1.0, 1.0], state_dim=0, image_shapes={"main_images": [16, 16, 3]},
                episodes=len(episodes), successes=len(episodes), episodes_attempted=len(episodes),
                successes_attempted=len(episodes), rows=sum(e.length for e in episodes), expert="none", seed=0,
                tasks=sorted({e.task for e in episodes}))


def test_an_interrupted_write_leaves_no_folder(tmp_path, monkeypatch):
    import embodied.data.lerobot.writer as writer

    def interrupted(*args):
        raise KeyboardInterrupt  # the data and videos are written, meta/ is not

    monkeypatch.setattr(writer, "_write_meta", interrupted)
    with pytest.raises(KeyboardInterrupt):
        collect(load_config(None, ["env.id=Reach-v0", "env.num_envs=2", "policy.action_chunk=4"]), episodes=2,
                out=tmp_path / "reach", data_format="lerobot")
    assert list(tmp_path.iterdir()) == []


def test_data_info_describes_both_formats_and_collect_writes_lerobot_from_the_cli(tmp_path, capsys):
    base = ["collect", "configs/reach_mlp_ppo.yaml", "env.num_envs=2", "policy.action_chunk=4",
            "env.max_episode_steps=30", "--episodes", "2"]
    assert main([*base, "--out", str(tmp_path / "arrow")]) == 0
    assert main([*base, "--out", str(tmp_path / "lerobot"), "--format", "lerobot"]) == 0
    assert "frames (LeRobot v3.0)" in capsys.readouterr().out
    assert read_meta(tmp_path / "arrow").action_chunk == 4
    assert main(["data", "info", str(tmp_path / "lerobot")]) == 0
    out = capsys.readouterr().out
    frames = LeRobotDemos(tmp_path / "lerobot").info.total_frames
    for line in ("LeRobot v3.0", "episodes: 2", f"frames:   {frames}", "fps:      20", "disk:", "Reach-v0",
                 "observation.state", "float32  (10,)", "action", "reach the red target", "--format lerobot"):
        assert line in out, line
    assert f"     2 {frames:8d}  reach the red target" in out  # episodes and frames of the task
    assert main(["data", "info", str(tmp_path / "arrow")]) == 0
    out = capsys.readouterr().out
    for line in ("embodied Arrow (format version 1)", "episodes: 2", f"frames:   {frames} (", "rows)",
                 "not recorded", "actions", "float32  (4, 4)", "Reach-v0 (state)", "4 sub-steps a row"):
        assert line in out, line
    (tmp_path / "empty").mkdir()
    assert main(["data", "info", str(tmp_path / "empty")]) == 2
    assert "neither meta.json" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--format must be arrow or lerobot"):
        collect(load_config(None, []), 1, tmp_path / "x", data_format="parquet")


def test_encoding_video_leaves_the_thread_at_its_scheduling_policy(tmp_path):
    """libsvtav1 run as root (as CI is) makes the thread that drives it SCHED_FIFO 99; the threads started after it
    then spin at real-time priority and the test process hangs. The encoder puts the policy back."""
    import os

    import numpy as np

    from embodied.data.lerobot.video import VideoEncoder

    before = (os.sched_getscheduler(0), os.sched_getparam(0))
    with VideoEncoder(tmp_path / "v.mp4", fps=10) as encoder:
        for k in range(4):
            encoder.add(np.full((16, 16, 3), 40 * k, dtype=np.uint8))
            assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before
    assert (os.sched_getscheduler(0), os.sched_getparam(0)) == before
    assert encoder.frames == 4 and (tmp_path / "v.mp4").stat().st_size > 0

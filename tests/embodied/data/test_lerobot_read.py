"""Reading LeRobot folders built by hand from LeRobot's layout: every frame exact, chunks padded, bad input named."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.data import ReadOptions, collate, detect_format, open_demonstrations
from embodied.data.lerobot import LeRobotDemos, LeRobotError
from embodied.policy.base import PolicySpec
from tests.embodied.data.lerobot_folders import (FPS, SIZE, TASKS, action, build_images, build_v3, build_v21, encode,
                                                 frame_value, states)

LENGTHS = (6, 9, 5)


@pytest.fixture(scope="module")
def v3(tmp_path_factory) -> Path:
    """Episodes 0 and 1 share file-000.mp4 of each camera (episode 1 from 0.6 s on), episode 2 has file-001."""
    return build_v3(tmp_path_factory.mktemp("lerobot") / "aloha_like", LENGTHS)


def copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def spec(action_dim: int = 2, state_dim: int = 3, image: tuple[int, ...] | None = (*SIZE, 3),
         wrist: tuple[int, ...] | None = (*SIZE, 3)) -> PolicySpec:
    return PolicySpec(state_dim, image, action_dim, (-1.0,) * action_dim, (1.0,) * action_dim, wrist)


def assert_frame(sample, episode: int, frame: int, wrist: bool = True) -> None:
    assert sample.obs["states"].dtype == np.float32 and sample.obs["states"].tolist() == states(episode, frame)
    image = sample.obs["main_images"]
    assert image.dtype == np.uint8 and image.shape == (*SIZE, 3)
    assert abs(float(image.mean()) - frame_value(episode, frame)) < 3  # neighbours are 9 grey levels away
    if wrist:
        assert abs(float(sample.obs["wrist_images"].mean()) - (255 - frame_value(episode, frame))) < 3
    assert sample.obs["task_descriptions"] == TASKS[episode % 2]


def test_a_hand_built_v3_folder_gives_every_frame_exactly_with_chunks_padded_at_episode_ends(v3):
    assert detect_format(v3) == "lerobot"
    data = open_demonstrations(v3, ReadOptions(action_chunk=4))
    assert isinstance(data, LeRobotDemos) and data.fps == FPS and len(data) == sum(LENGTHS)
    assert data.obs_keys == ["states", "main_images", "wrist_images"]  # ALOHA's camera names, found by default
    assert data.episode_indices.tolist() == [e for e, n in enumerate(LENGTHS) for _ in range(n)]
    assert data.steps.tolist() == [f for n in LENGTHS for f in range(n)]
    order = np.random.default_rng(0).permutation(len(data))  # random access: seeks back and forth across files
    for i in order:
        e, f = int(data.episode_indices[i]), int(data.steps[i])
        sample = data[int(i)]
        assert_frame(sample, e, f)
        left = LENGTHS[e] - f
        assert sample.executed.dtype == torch.bool and sample.executed.tolist() == [k < left for k in range(4)]
        expected = [action(e, f + k) if k < left else [0.0, 0.0] for k in range(4)]  # action_is_pad: 0
        assert sample.actions.dtype == torch.float32 and sample.actions.tolist() == expected
    obs, actions, executed = collate([data[0], data[len(data) - 1]])
    assert obs["main_images"].shape == (2, *SIZE, 3) and actions.shape == (2, 4, 2) and executed.shape == (2, 4)
    copy_ = pickle.loads(pickle.dumps(data))  # as a spawned DataLoader worker gets it: opens its own videos
    np.testing.assert_array_equal(copy_[7].obs["wrist_images"], data[7].obs["wrist_images"])


def test_v21_folders_and_images_stored_in_the_parquet_are_read_the_same_way(tmp_path):
    old = open_demonstrations(build_v21(tmp_path / "v21", (4, 6)), ReadOptions(action_chunk=2))
    assert old.info.version == "v2.1" and len(old) == 10
    for i in range(len(old)):
        assert_frame(old[i], int(old.episode_indices[i]), int(old.steps[i]))
    pngs = open_demonstrations(build_images(tmp_path / "png", (3, 4)), ReadOptions(action_chunk=2))
    assert pngs.obs_keys == ["states", "main_images"] and len(pngs) == 7
    for i in reversed(range(len(pngs))):
        sample = pngs[i]
        assert_frame(sample, int(pngs.episode_indices[i]), int(pngs.steps[i]), wrist=False)
        assert sample.obs["main_images"].mean() == frame_value(int(pngs.episode_indices[i]), int(pngs.steps[i]))


def test_fit_serves_the_envs_keys_at_its_image_size_and_names_both_dimensions_on_a_mismatch(v3):
    data = LeRobotDemos(v3, action_chunk=2)
    data.fit(spec(image=(16, 24, 3), wrist=None), action_chunk=3, needed={"images"})
    sample = data[7]  # episode 1, frame 1
    assert data.obs_keys == ["states", "main_images"] and sample.actions.shape == (3, 2)
    assert sample.obs["main_images"].shape == (16, 24, 3)  # resized to the env's
    assert abs(float(sample.obs["main_images"].mean()) - frame_value(1, 1)) < 3
    data.fit(spec(state_dim=0), 2, {"images"})
    assert data.obs_keys == ["main_images", "wrist_images"] and data[7].obs["main_images"].shape == (*SIZE, 3)
    with pytest.raises(LeRobotError, match=r"its actions \(action\) have 2 dimensions, the policy's \(the env's\) 7"):
        data.fit(spec(action_dim=7), 2, {"images"})
    with pytest.raises(LeRobotError, match=r"its states \(observation.state\) have 3 dimensions, the env's 8"):
        data.fit(spec(state_dim=8), 2, {"images"})


def test_a_feature_mapping_that_names_a_missing_or_unusable_feature_fails_listing_the_features(v3, tmp_path):
    listing = "observation.images.cam_high video (32, 48, 3)"
    with pytest.raises(LeRobotError, match="sft.features.main_images: 'observation.images.top' is not a feature") as e:
        LeRobotDemos(v3, features={"main_images": "observation.images.top"})
    message = str(e.value)
    assert listing in message and "observation.state float32 (3,)" in message and "meta/info.json" in message
    with pytest.raises(LeRobotError, match="sft.features.states: .*is not a vector"):
        LeRobotDemos(v3, features={"states": "observation.images.cam_high"})
    with pytest.raises(LeRobotError, match="sft.features.wrist_images: .*is not a camera"):
        LeRobotDemos(v3, features={"wrist_images": "observation.state"})
    # Explicit names win over the usual ones; null leaves a key out, and the env's wrist camera then too.
    swapped = LeRobotDemos(v3, features={"main_images": "observation.images.cam_left_wrist", "wrist_images": None})
    swapped.fit(spec(), 1, {"images"})
    assert swapped.obs_keys == ["states", "main_images"]
    assert abs(float(swapped[0].obs["main_images"].mean()) - (255 - frame_value(0, 0))) < 3
    # Two of the usual names present: ambiguous, once the key is needed.
    both = copy(v3, tmp_path)
    info = json.loads((both / "meta/info.json").read_text())
    info["features"]["observation.images.image"] = info["features"]["observation.images.cam_high"] | {"dtype": "image"}
    info["features"]["observation.images.cam_high"]["info"] = {"is_depth_map": True}
    info["features"]["observation.qpos"] = info["features"].pop("observation.state")  # a name not looked up
    (both / "meta/info.json").write_text(json.dumps(info))
    ambiguous = LeRobotDemos(both, features={"wrist_images": None})  # only main_images is ambiguous; not needed yet
    with pytest.raises(LeRobotError, match="sft.features.main_images: no feature .* feeds main_images .ambiguous: the "
                                           "dataset has observation.images.image, observation.images.cam_high") as e:
        ambiguous.check(1, {"images"})
    assert "observation.images.cam_high video (32, 48, 3) depth" in str(e.value)
    with pytest.raises(LeRobotError, match="is a depth map; embodied's observations have no depth"):
        LeRobotDemos(both, features={"main_images": "observation.images.cam_high"})
    with pytest.raises(LeRobotError, match=r"sft.features.states: no feature .* feeds states .none of the usual names "
                                           r"\(observation.state, state\)\); name one with "
                                           r"sft.features.states=FEATURE"):
        ambiguous.check(1, {"states"})


def test_a_folder_without_meta_info_json_is_refused_naming_the_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LeRobotError, match="empty has no meta/info.json: it is not a LeRobot dataset"):
        LeRobotDemos(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="has neither meta.json .* nor meta/info.json"):
        open_demonstrations(tmp_path / "empty")
    with pytest.raises(LeRobotError, match="does not exist"):
        LeRobotDemos(tmp_path / "nope")


def test_an_unsupported_codebase_version_is_refused_naming_the_file_and_field(v3, tmp_path):
    old = copy(v3, tmp_path)
    info = json.loads((old / "meta/info.json").read_text())
    (old / "meta/info.json").write_text(json.dumps(info | {"codebase_version": "v1.6"}))
    with pytest.raises(LeRobotError, match=r"meta/info.json: codebase_version 'v1.6' is not one this reader reads "
                                           r"\(v2.0, v2.1, v3.0\)"):
        LeRobotDemos(old)


def test_a_video_whose_frame_count_does_not_match_its_parquet_rows_is_refused(v3, tmp_path):
    short = copy(v3, tmp_path)
    video = short / "videos/observation.images.cam_high/chunk-000/file-001.mp4"
    encode(video, [frame_value(2, f) for f in range(LENGTHS[2] - 1)])  # episode 2 loses its last frame
    with pytest.raises(LeRobotError, match=r"file-001.mp4: 4 frames, but its episodes \(2\) have 5 parquet rows "
                                           r"and end at frame 5 \(videos/observation.images.cam_high/to_timestamp in "
                                           r"meta/episodes/chunk-000/file-000.parquet\)"):
        LeRobotDemos(short)
    # As many frames, but at another rate: the frame at a row's timestamp is missing, named when read.
    encode(video, [frame_value(2, f) for f in range(LENGTHS[2])], fps=15)
    other_rate = LeRobotDemos(short)
    other_rate[sum(LENGTHS[:2])]  # the episode's first frame, at 0 s, is there
    with pytest.raises(LeRobotError, match=r"file-001.mp4: no frame at 0.1000 s \(the next one is at 0.1333 s\) "
                                           r"\(episode 2, frame 1, feature observation.images.cam_high\)"):
        other_rate[sum(LENGTHS[:2]) + 1]
    # The episodes table and the rows disagreeing is named too.
    import pandas as pd

    table = short / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pd.read_parquet(table)
    episodes.loc[1, "length"] = 8
    episodes.to_parquet(table, index=False)
    with pytest.raises(LeRobotError, match=r"data/chunk-000/file-000.parquet: episode 1 has 9 rows, "
                                           r"meta/episodes/chunk-000/file-000.parquet gives it length 8"):
        LeRobotDemos(short)


@pytest.mark.parametrize("name", ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                                  "meta/tasks.parquet"])
def test_a_corrupt_parquet_file_is_named(v3, tmp_path, name):
    broken = copy(v3, tmp_path)
    path = broken / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated, as by an interrupted download
    with pytest.raises(LeRobotError, match=f"{name}: not a readable parquet file"):
        LeRobotDemos(broken)


def test_a_dataset_bigger_than_the_frame_cache_reads_in_bounded_memory_and_the_same(v3):
    frame_bytes = SIZE[0] * SIZE[1] * 3
    bounded = LeRobotDemos(v3, action_chunk=2, frame_cache_mb=6 * frame_bytes / 2**20)  # 6 of the 40 frames
    bounded.videos.max_open = 1  # ... and one open video of the 4
    reference = LeRobotDemos(v3, action_chunk=2)
    loader = torch.utils.data.DataLoader(bounded, batch_size=4, shuffle=True, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(0))
    seen = 0
    for _ in range(2):
        for obs, _, _ in loader:
            seen += len(obs["task_descriptions"])
            assert bounded.cache.bytes <= 6 * frame_bytes and bounded.videos.open_files <= 1
    assert seen == 2 * len(bounded) and bounded.cache.peak_bytes == 6 * frame_bytes and len(bounded.cache) == 6
    for i in range(len(bounded)):
        for key in ("main_images", "wrist_images"):
            np.testing.assert_array_equal(bounded[i].obs[key], reference[i].obs[key])
    cached = bounded[3].obs["main_images"]
    cached[:] = 0  # a sample is a copy: the cache keeps its frame
    assert bounded[3].obs["main_images"].mean() > 0
    nothing = LeRobotDemos(v3, frame_cache_mb=0)
    nothing[0], nothing[1]
    assert nothing.cache.peak_bytes == 0 and len(nothing.cache) == 0

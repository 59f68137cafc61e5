"""``embodied collect``: expert episodes through the env workers, written as a dataset that reads back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.data import DemoDataset, check_compatible, collate, read_meta
from embodied.data.collect import collect

SMALL = ["env.num_envs=2", "eval_env.num_envs=2", "policy.action_chunk=4"]


def test_state_demonstrations_read_back_with_shapes_seeds_and_whole_episodes(tmp_path):
    import datasets

    cfg = load_config(None, ["env.id=Reach-v0", *SMALL, "env.max_episode_steps=40", "experiment.seed=5"])
    report = collect(cfg, episodes=3, out=tmp_path / "reach")
    assert report.episodes == 3 and report.successes == report.attempted == 4  # two rounds of two envs
    raw = datasets.load_from_disk(str(tmp_path / "reach"))  # readable without embodied
    assert raw.features["actions"].shape == (4, 3 + 1) and raw.features["executed"].length == 4
    episodes = np.asarray(raw["episode_index"])
    assert sorted(set(episodes.tolist())) == [0, 1, 2]
    assert sorted(set(raw["seed"])) == [5, 6, 7]
    for k in range(3):
        rows = np.flatnonzero(episodes == k)
        assert [raw[int(i)]["step"] for i in rows] == list(range(len(rows)))
        assert [raw[int(i)]["done"] for i in rows] == [False] * (len(rows) - 1) + [True]
        assert all(raw[int(i)]["success"] for i in rows)
    data = DemoDataset(tmp_path / "reach")
    item = data[0]
    assert item["states"].dtype == np.float32 and item["states"].shape == (read_meta(tmp_path / "reach")["state_dim"],)
    assert item["actions"].shape == (4, 4) and item["executed"].dtype == bool
    assert item["task_descriptions"] == "reach the red target"
    obs, actions, executed = collate([data[0], data[1]])
    assert obs["states"].shape[0] == 2 and obs["task_descriptions"] == ["reach the red target"] * 2
    assert actions.shape == (2, 4, 4) and executed.shape == (2, 4)
    # Sub-steps after an episode's end carry zero actions.
    last = np.flatnonzero(np.asarray(raw["done"]))[0]
    row = raw[int(last)]
    assert all(not any(a) for a, e in zip(row["actions"], row["executed"]) if not e)


def test_image_demonstrations_keep_exact_uint8_images_and_instructions(tmp_path):
    cfg = load_config(None, ["env.id=PickColor-v0", "env.obs_mode=rgb", "policy.type=vla", *SMALL,
                             "env.max_episode_steps=80"])
    collect(cfg, episodes=2, out=tmp_path / "pc")
    meta = read_meta(tmp_path / "pc")
    assert meta["image_shapes"] == {"main_images": [64, 64, 3], "wrist_images": [64, 64, 3]} and meta["state_dim"] == 0
    data = DemoDataset(tmp_path / "pc")
    assert data.obs_keys == ["main_images", "wrist_images"]
    item = data[0]
    assert item["main_images"].dtype == np.uint8 and item["main_images"].shape == (64, 64, 3)
    assert item["main_images"].std() > 0  # a rendered scene, not a blank
    assert item["task_descriptions"].startswith("pick up the ") and item["task_descriptions"].endswith(" cube")


def test_an_env_without_an_expert_lists_those_with_one(tmp_path):
    cfg = load_config(None, ["env.id=tests.toy_envs:CountingEnv", "env.num_envs=2"])
    with pytest.raises(ConfigError, match="has no scripted expert") as info:
        collect(cfg, episodes=1, out=tmp_path / "x")
    assert "Reach-v0" in str(info.value) and "PickColor-v0" in str(info.value)
    assert not (tmp_path / "x").exists()


def test_an_interrupted_collect_leaves_no_dataset(tmp_path, monkeypatch):
    import datasets

    def interrupted(self, *args, **kwargs):
        (Path(args[0]) / "half-written.arrow").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", interrupted)
    cfg = load_config(None, ["env.id=Reach-v0", *SMALL])
    with pytest.raises(KeyboardInterrupt):
        collect(cfg, episodes=1, out=tmp_path / "reach")
    assert list(tmp_path.iterdir()) == []  # neither the dataset nor its temp folder


def test_the_cli_collects_and_refuses_to_overwrite(tmp_path, capsys):
    args = ["collect", "configs/reach_mlp_ppo.yaml", *SMALL, "--episodes", "2", "--out", str(tmp_path / "d")]
    assert main(args) == 0
    assert "wrote 2 episodes" in capsys.readouterr().out
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["episodes"] == 2
    assert main(args) == 2 and "exists" in capsys.readouterr().err


def test_a_dataset_that_does_not_fit_the_policy_is_named():
    meta = {"action_chunk": 4, "action_dim": 4, "state_dim": 10, "image_shapes": {}, "obs_mode": "state"}
    with pytest.raises(ValueError, match="its chunks have 4 sub-actions, policy.action_chunk is 2"):
        check_compatible(meta, 2, None, None)
    with pytest.raises(ValueError, match="its actions have 4 dimensions, the env's 7"):
        check_compatible(meta, 4, 7, None)
    with pytest.raises(ValueError, match="it holds states .*the policy needs images"):
        check_compatible(meta, 4, 4, {"images"})
    check_compatible(meta, 4, 4, {"states"})


def test_a_folder_that_is_not_a_dataset_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DemoDataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        DemoDataset(tmp_path / "empty")

"""``embodied collect``: expert episodes through the env workers, written as a dataset that reads back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from embodied.cli import main
from embodied.config import ConfigError, load_config
from embodied.data import DemoDataset, collate, read_meta
from embodied.runs.collect import collect

SMALL = ["env.num_envs=2", "eval_env.num_envs=2", "policy.action_chunk=4"]


def load_raw(path):
    """The dataset as any machine reads it: Hugging Face ``datasets`` alone."""
    import datasets

    return datasets.load_from_disk(str(path)).with_format("numpy")


def test_state_episodes_read_back_whole_seeded_and_replayable(tmp_path):
    from embodied.envs.reach import ReachEnv

    # Two env workers over three envs (2 + 1): seeds follow the global env index.
    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=4", "policy.action_chunk=4", "cluster.num_env_workers=2",
                             "env.max_episode_steps=40", "experiment.seed=5"])
    report = collect(cfg, episodes=3, out=tmp_path / "reach")
    assert (report.episodes, report.attempted, report.successes) == (3, 3, 3)
    raw = load_raw(tmp_path / "reach")  # readable without embodied
    assert raw.features["actions"].shape == (4, 4) and raw.features["actions"].dtype == "float32"
    assert raw.features["states"].feature.dtype == "float32" and raw.features["executed"].length == 4
    rows = raw[:]
    assert rows["states"].dtype == np.float32 and rows["states"].shape == (report.rows, 10)
    assert sorted(set(rows["episode_index"].tolist())) == [0, 1, 2]
    assert list(dict.fromkeys(rows["seed"].tolist())) == [5, 6, 7]  # episode k from seed experiment.seed + k
    assert set(rows["task"].tolist()) == {"reach the red target"} and rows["success"].all()
    for k in range(3):
        ep = np.flatnonzero(rows["episode_index"] == k)
        assert rows["step"][ep].tolist() == list(range(len(ep)))
        assert rows["done"][ep].tolist() == [False] * (len(ep) - 1) + [True]  # complete episodes
        assert rows["executed"][ep[:-1]].all()  # only the last chunk can stop early
        not_run = ~rows["executed"][ep]
        assert not rows["actions"][ep][not_run].any() and not rows["rewards"][ep][not_run].any()
        # The seed replays the episode: same first state, and the executed actions succeed again.
        env = ReachEnv(obs_mode="state", max_episode_steps=40)
        obs, _ = env.reset(seed=int(rows["seed"][ep[0]]))
        np.testing.assert_array_equal(obs["states"], rows["states"][ep[0]])
        for t in ep:
            for action in rows["actions"][t][rows["executed"][t]]:
                obs, _, terminated, truncated, info = env.step(action)
        assert info["success"] and terminated
    meta = read_meta(tmp_path / "reach")
    assert (meta.env_id, meta.obs_mode, meta.action_chunk, meta.action_dim) == ("Reach-v0", "state", 4, 4)
    assert meta.state_dim == 10
    assert (meta.episodes, meta.successes, meta.rows, meta.expert, meta.seed) == (3, 3, report.rows, "ReachExpert", 5)
    assert meta.image_shapes == {} and meta.tasks == ["reach the red target"]


def test_image_episodes_keep_exact_uint8_images_and_the_instructions(tmp_path):
    from embodied.envs.pick_color import PickColorEnv

    cfg = load_config(None, ["env.id=PickColor-v0", "env.obs_mode=rgb", "policy.type=vla", *SMALL,
                             "env.max_episode_steps=60", "experiment.seed=3"])
    collect(cfg, episodes=3, out=tmp_path / "pc")
    meta = read_meta(tmp_path / "pc")
    assert meta.image_shapes == {"main_images": [64, 64, 3], "wrist_images": [64, 64, 3]} and meta.state_dim == 0
    assert meta.obs_keys == ["main_images", "wrist_images"] and meta.expert == "PickColorExpert"
    raw = load_raw(tmp_path / "pc")
    assert raw.features["main_images"].dtype == "uint8" and "states" not in raw.features
    data = DemoDataset(tmp_path / "pc")
    first = np.flatnonzero(data.columns["episode_index"] == 0)[0]
    sample = data[int(first)]
    assert sample.obs["main_images"].dtype == np.uint8 and sample.obs["main_images"].std() > 0  # a rendered scene
    # The episode's seed gives back its first images bit for bit, and its instruction.
    env = PickColorEnv(obs_mode="rgb", max_episode_steps=60)
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs["main_images"], sample.obs["main_images"])
    np.testing.assert_array_equal(obs["wrist_images"], sample.obs["wrist_images"])
    assert sample.obs["task_descriptions"] == env.task_description
    assert all(t.startswith("pick up the ") and t.endswith(" cube") for t in data.tasks)
    assert set(data.tasks) == set(meta.tasks)
    env.close()


def test_only_successful_episodes_by_default_and_all_of_them_with_keep_failed(tmp_path):
    # Three sub-steps are too few for some Reach targets: the expert fails part of the episodes.
    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=8", "env.max_episode_steps=3", "policy.action_chunk=2"])
    kept = collect(cfg, episodes=6, out=tmp_path / "ok")
    rows = load_raw(tmp_path / "ok")[:]
    assert kept.episodes == 6 and kept.attempted > kept.successes and rows["success"].all()
    assert rows["done"].sum() == 6 and 0 < read_meta(tmp_path / "ok").expert_success_rate < 1
    every = collect(cfg, episodes=8, out=tmp_path / "all", keep_failed=True)
    rows = load_raw(tmp_path / "all")[:]
    assert every.episodes == every.attempted == 8 and rows["done"].sum() == 8
    assert not rows["success"].all() and read_meta(tmp_path / "all").successes == every.successes
    assert list(dict.fromkeys(rows["seed"].tolist())) == list(range(8))  # failures keep their seeds too


@pytest.mark.parametrize("task", ["Reach-v0", "Push-v0", "PickPlace-v0", "Stack-v0", "PickColor-v0"])
def test_the_expert_succeeds_in_nearly_every_collected_episode(tmp_path, task):
    report = collect(load_config(None, [f"env.id={task}", "env.num_envs=8", "env.max_episode_steps=100",
                                        "policy.action_chunk=4"]), episodes=32, out=tmp_path / "d", keep_failed=True)
    assert report.successes / report.attempted >= 0.9


def test_a_task_without_an_expert_fails_before_any_worker_listing_those_with_one(tmp_path, monkeypatch, capsys):
    import embodied.runs.collect as collect_module

    monkeypatch.setattr(collect_module, "make_backend", lambda *a: pytest.fail("a worker started"))
    cfg = load_config(None, ["env.id=tests.toy_envs:CountingEnv", "env.num_envs=2"])
    with pytest.raises(ConfigError, match="has no scripted expert") as info:
        collect(cfg, episodes=1, out=tmp_path / "x")
    for task in ("Reach-v0", "Push-v0", "PickPlace-v0", "Stack-v0", "PickColor-v0"):
        assert task in str(info.value)
    assert main(["collect", "configs/reach_mlp_ppo.yaml", "env.id=tests.toy_envs:CountingEnv", "--episodes", "1",
                 "--out", str(tmp_path / "x")]) == 2
    assert "tasks with one: " in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_an_expert_that_needs_certain_env_kwargs_is_asked_before_any_worker(tmp_path, monkeypatch):
    import embodied.runs.collect as collect_module

    monkeypatch.setattr(collect_module, "make_backend", lambda *a: pytest.fail("a worker started"))
    cfg = load_config(None, ["env.id=tests.toy_envs:PickyCountingEnv", "env.num_envs=2"])
    with pytest.raises(ConfigError, match=r"env\.kwargs\.terminate_at: this expert needs 5 \(got None\) \(env\.id "
                                          r"'tests\.toy_envs:PickyCountingEnv': its scripted expert needs it\)"):
        collect(cfg, episodes=1, out=tmp_path / "x")
    assert not any(tmp_path.iterdir())
    collect_module.check_expert(load_config(None, ["env.id=tests.toy_envs:PickyCountingEnv",
                                                   "env.kwargs={terminate_at: 5}"]))  # as it asks: no error


def test_an_interrupted_write_leaves_no_dataset(tmp_path, monkeypatch):
    from embodied.data.format import DatasetWriter

    def interrupted(self, meta):
        self.flush()  # the rows are all there, meta.json is not yet
        raise KeyboardInterrupt

    monkeypatch.setattr(DatasetWriter, "finish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        collect(load_config(None, ["env.id=Reach-v0", *SMALL]), episodes=2, out=tmp_path / "reach")
    assert list(tmp_path.iterdir()) == []  # neither the dataset nor its temp folder


def test_an_env_that_fails_mid_collect_leaves_no_dataset_and_the_cli_names_it(tmp_path, monkeypatch, capsys):
    from embodied.envs.reach import ReachEnv

    original, calls = ReachEnv.step, {"n": 0}

    def step(self, action):
        calls["n"] += 1
        if calls["n"] > 30:  # a few episodes in
            raise RuntimeError("simulator exploded")
        return original(self, action)

    monkeypatch.setattr(ReachEnv, "step", step)
    out = tmp_path / "reach"
    assert main(["collect", "configs/reach_mlp_ppo.yaml", *SMALL, "--episodes", "40", "--out", str(out)]) == 1
    assert "simulator exploded" in capsys.readouterr().err
    assert calls["n"] > 30 and list(tmp_path.iterdir()) == []


def test_the_cli_collects_end_to_end_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "d"
    args = ["collect", "configs/pick_place_mlp_sft.yaml", *SMALL, "env.max_episode_steps=60", "--episodes", "2",
            "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 episodes" in printed and "episodes/s" in printed and "the expert succeeded in" in printed
    meta = json.loads((out / "meta.json").read_text())
    assert meta["episodes"] == 2 and meta["env_id"] == "PickPlace-v0" and meta["format_version"] == 1
    assert meta["created_by"].startswith("embodied collect configs/pick_place_mlp_sft.yaml")
    obs, actions, executed = collate([DemoDataset(out)[0]])
    assert actions.shape == (1, 4, 4) and executed.shape == (1, 4) and obs["states"].shape[0] == 1
    assert main(args) == 2 and "exists" in capsys.readouterr().err


def test_noisy_collection_records_the_noise_and_differs_from_the_clean_one(tmp_path, capsys):
    base = ["collect", "configs/pick_place_mlp_sft.yaml", *SMALL, "env.max_episode_steps=60", "--episodes", "2"]
    assert main([*base, "--out", str(tmp_path / "clean")]) == 0
    assert main([*base, "--out", str(tmp_path / "dart"), "--noise", "0.1"]) == 0
    clean, dart = read_meta(tmp_path / "clean"), read_meta(tmp_path / "dart")
    assert (clean.action_noise, dart.action_noise) == (0.0, 0.1)
    assert dart.created_by.split(" (")[0].endswith("--noise 0.1")
    a, b = DemoDataset(tmp_path / "clean")[0], DemoDataset(tmp_path / "dart")[0]
    np.testing.assert_array_equal(a.obs["states"], b.obs["states"])  # same seed, same start
    assert not np.array_equal(DemoDataset(tmp_path / "clean")[1].obs["states"], DemoDataset(tmp_path / "dart")[1].obs["states"])
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "bad"), "--noise", "1.5"]) == 2
    assert "--noise must be in [0, 1]" in capsys.readouterr().err and not (tmp_path / "bad").exists()

"""``DemoDataset`` / ``collate``: samples and batches a policy takes as is; clear errors for bad datasets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.config import load_config
from embodied.data import DemoBatch, DemoDataset, DemoSample, Meta, check_compatible, collate, read_meta
from embodied.policy.base import PolicySpec, build_policy
from embodied.runs.collect import collect


@pytest.fixture(scope="module")
def pick_color(tmp_path_factory) -> Path:
    """3 PickColor episodes with states and both cameras."""
    out = tmp_path_factory.mktemp("demos") / "pick_color"
    collect(load_config(None, ["env.id=PickColor-v0", "env.obs_mode=state+rgb", "env.num_envs=3",
                               "env.max_episode_steps=60", "policy.action_chunk=4"]), episodes=3, out=out)
    return out


def spec_of(meta: Meta) -> PolicySpec:
    shapes = {k: tuple(v) for k, v in meta.image_shapes.items()}
    return PolicySpec(meta.state_dim, shapes.get("main_images"), meta.action_dim, tuple(meta.action_low),
                      tuple(meta.action_high), shapes.get("wrist_images"))


def test_samples_are_typed_and_exact(pick_color):
    import datasets

    data = DemoDataset(pick_color)
    raw = datasets.load_from_disk(str(pick_color)).with_format("numpy")
    assert len(data) == len(raw) == data.meta.rows and data.obs_keys == ["states", "main_images", "wrist_images"]
    sample = data[len(data) - 1]
    assert isinstance(sample, DemoSample)
    assert sample.obs["states"].dtype == np.float32 and sample.obs["states"].shape == (data.meta.state_dim,)
    assert sample.obs["main_images"].dtype == np.uint8 and sample.obs["main_images"].shape == (64, 64, 3)
    assert sample.obs["wrist_images"].dtype == np.uint8
    assert isinstance(sample.obs["task_descriptions"], str) and sample.obs["task_descriptions"] in data.meta.tasks
    assert sample.actions.dtype == torch.float32 and sample.actions.shape == (4, 4)
    assert sample.executed.dtype == torch.bool and sample.executed.shape == (4,)
    row = raw[len(data) - 1]
    np.testing.assert_array_equal(sample.obs["main_images"], row["main_images"])  # uint8 kept exact
    np.testing.assert_array_equal(sample.actions.numpy(), row["actions"])
    assert data.episode_indices.tolist() == raw[:]["episode_index"].tolist()


def test_collated_batches_go_straight_into_policies(pick_color):
    data = DemoDataset(pick_color)
    loader = torch.utils.data.DataLoader(data, batch_size=5, shuffle=True, collate_fn=collate)
    batch = next(iter(loader))
    assert isinstance(batch, DemoBatch)
    obs, actions, executed = batch
    assert obs["states"].shape == (5, data.meta.state_dim) and obs["main_images"].shape == (5, 64, 64, 3)
    assert obs["main_images"].dtype == np.uint8 and isinstance(obs["task_descriptions"], list)
    assert len(obs["task_descriptions"]) == 5 and all(isinstance(t, str) for t in obs["task_descriptions"])
    assert actions.shape == (5, 4, 4) and executed.shape == (5, 4)
    spec = spec_of(data.meta)
    for overrides in (["policy.type=mlp"], ["policy.type=cnn"]):
        cfg = load_config(None, [*overrides, "policy.action_chunk=4", "env.obs_mode=state+rgb"])
        check_compatible(data.meta, cfg.policy.action_chunk, spec.action_dim, cfg.policy.required_observations(),
                         spec.image_shape)
        policy = build_policy(cfg.policy, spec)
        assert policy.act(obs).actions.shape == actions.shape
        logprobs, _, _ = policy.evaluate(policy.forward_inputs(obs), actions)
        assert logprobs.shape[0] == 5 and torch.isfinite(logprobs).all()


def test_a_dataset_that_does_not_fit_the_policy_is_named(pick_color):
    meta = dataclasses.replace(read_meta(pick_color), state_dim=0, image_shapes={})  # no observations at all
    check_compatible(read_meta(pick_color), 4, 4, {"states", "images"}, (64, 64, 3))
    check_compatible(read_meta(pick_color), 4, 4, {"states", "main_images", "wrist_images"})
    with pytest.raises(ValueError, match="its chunks have 4 sub-actions, policy.action_chunk is 2"):
        check_compatible(read_meta(pick_color), 2, None, None)
    with pytest.raises(ValueError, match=r"its actions have 4 dimensions, the policy's \(the env's\) 7"):
        check_compatible(read_meta(pick_color), 4, 7, None)
    with pytest.raises(ValueError, match=r"its main_images are \(64, 64, 3\), the env's \(96, 96, 3\)"):
        check_compatible(read_meta(pick_color), 4, 4, {"images"}, (96, 96, 3))
    with pytest.raises(ValueError, match="holds no observations .*needs main_images, states .missing: main_images, st"):
        check_compatible(meta, 4, 4, {"images", "states"})
    state_only = dataclasses.replace(meta, state_dim=16, obs_mode="state")
    with pytest.raises(ValueError, match="it holds states .obs mode 'state'., the policy needs main_images"):
        check_compatible(state_only, 4, 4, {"images"})
    with pytest.raises(ValueError) as info:  # every mismatch at once
        check_compatible(state_only, 2, 7, {"images"})
    assert str(info.value).count(";") == 2 and "PickColor-v0" in str(info.value)


def test_a_folder_that_is_not_a_dataset_or_an_empty_one_is_refused(tmp_path, pick_color):
    import shutil

    with pytest.raises(FileNotFoundError, match="does not exist"):
        DemoDataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no meta.json: it is not a demonstrations dataset"):
        DemoDataset(tmp_path / "empty")
    only_meta = tmp_path / "only_meta"
    only_meta.mkdir()
    shutil.copy(pick_color / "meta.json", only_meta)
    with pytest.raises(FileNotFoundError, match="has a meta.json but no readable rows"):
        DemoDataset(only_meta)
    future = tmp_path / "future"
    shutil.copytree(pick_color, future)
    meta = json.loads((future / "meta.json").read_text())
    (future / "meta.json").write_text(json.dumps(meta | {"format_version": 99}))
    with pytest.raises(ValueError, match="format version 99, this embodied reads version 1"):
        DemoDataset(future)


def test_an_empty_dataset_is_refused(tmp_path, pick_color):
    import datasets

    from embodied.data.format import features

    meta = read_meta(pick_color)
    empty = tmp_path / "empty"
    datasets.Dataset.from_dict({k: [] for k in features(meta)}, features=features(meta)).save_to_disk(str(empty))
    (empty / "meta.json").write_text(json.dumps(dataclasses.asdict(meta) | {"episodes": 0, "rows": 0}))
    with pytest.raises(ValueError, match="holds no episodes"):
        DemoDataset(empty)

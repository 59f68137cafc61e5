"""Streaming writes: a dataset goes to disk a shard at a time, reads back as the one-file dataset does, and a
collect holds a shard of episodes, not all of them (the 8,000-episode PickColor collect that ran out of memory)."""

from __future__ import annotations

import dataclasses
import gc
import json
import weakref
from pathlib import Path

import numpy as np
import pytest

from embodied.config import load_config
from embodied.data import DemoDataset, DemoEpisode, Meta, read_meta
from embodied.data.format import DatasetWriter, columns, dataset_writer, episode_bytes, features, write_dataset
from embodied.data.info import summarize
from embodied.runs.collect import collect

C, A, S, H = 4, 3, 5, 8  # chunk, action dim, state dim, image side


def episodes(n: int, seed: int = 0) -> list[DemoEpisode]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        t = int(rng.integers(1, 7))
        executed = np.ones((t, C), bool)
        executed[-1, int(rng.integers(1, C + 1)):] = False
        out.append(DemoEpisode(
            seed=100 + k, task=f"task {k % 3}", success=bool(k % 4), executed=executed,
            obs={"states": rng.normal(size=(t, S)).astype(np.float32),
                 "main_images": rng.integers(0, 256, (t, H, H, 3), dtype=np.uint8),
                 "wrist_images": rng.integers(0, 256, (t, H, H, 3), dtype=np.uint8)},
            actions=rng.normal(size=(t, C, A)).astype(np.float32) * executed[..., None],
            rewards=rng.random((t, C)).astype(np.float32) * executed))
    return out


def meta_of(eps: list[DemoEpisode]) -> Meta:
    return Meta(env_id="Toy-v0", obs_mode="state+rgb", max_episode_steps=24, action_chunk=C, action_dim=A,
                action_low=[-1.0] * A, action_high=[1.0] * A, state_dim=S,
                image_shapes={"main_images": [H, H, 3], "wrist_images": [H, H, 3]}, episodes=len(eps),
                successes=sum(e.success for e in eps), episodes_attempted=len(eps),
                successes_attempted=sum(e.success for e in eps), rows=sum(e.length for e in eps), expert="none",
                seed=0, tasks=sorted({e.task for e in eps}), created_by="test")


def save_to_disk_reference(out: Path, eps: list[DemoEpisode], meta: Meta) -> Path:
    """The folder the writer made before it streamed: ``Dataset.from_dict(...).save_to_disk`` plus meta.json."""
    from datasets import Dataset

    Dataset.from_dict(columns(eps, meta), features=features(meta)).save_to_disk(str(out))
    fields = dataclasses.asdict(meta)
    (out / "meta.json").write_text(json.dumps({"format_version": fields.pop("format_version"), **fields}))
    return out


def arrow_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.arrow"))


def test_a_dataset_in_several_shards_reads_back_as_the_one_file_and_the_save_to_disk_ones(tmp_path):
    import datasets

    eps = episodes(30)
    meta = meta_of(eps)
    reference = save_to_disk_reference(tmp_path / "reference", eps, meta)
    one = write_dataset(tmp_path / "one", eps, meta)
    mean_mb = sum(episode_bytes(e) for e in eps) / len(eps) / 2**20
    # A batch about every episode, a new file every few: an iterator, so the writer never has them all.
    many = write_dataset(tmp_path / "many", iter(eps), meta, shard_mb=3 * mean_mb, batch_mb=mean_mb)
    assert arrow_files(one) == ["data-00000-of-00001.arrow"]
    files = arrow_files(many)
    assert 3 <= len(files) < 30 and files == [f"data-{i:05d}-of-{len(files):05d}.arrow" for i in range(len(files))]
    ref_rows = datasets.load_from_disk(str(reference))
    ref_table = ref_rows.with_format("arrow")[:]
    ref_data = DemoDataset(reference)
    for path in (one, many):
        rows = datasets.load_from_disk(str(path))  # datasets alone reads it, typed as before
        assert rows.features == ref_rows.features and len(rows) == meta.rows
        assert rows.with_format("arrow")[:].equals(ref_table)  # every column, every image byte
        assert json.loads((path / "dataset_info.json").read_text()) == json.loads(
            (reference / "dataset_info.json").read_text())
        data = DemoDataset(path)
        assert data.meta == read_meta(reference) == meta and data.tasks == ref_data.tasks
        for key, values in ref_data.columns.items():
            assert data.columns[key].dtype == values.dtype
            np.testing.assert_array_equal(data.columns[key], values)
        for key, values in ref_data.outcomes.items():
            np.testing.assert_array_equal(data.outcomes[key], values)
        info, ref_info = summarize(path), summarize(reference)  # embodied data info
        assert (info.episodes, info.frames, info.rows, info.tasks, info.features) == (
            ref_info.episodes, ref_info.frames, ref_info.rows, ref_info.tasks, ref_info.features)
    # The images are those of the episodes, bit for bit, in order.
    np.testing.assert_array_equal(DemoDataset(many).columns["wrist_images"],
                                  np.concatenate([e.obs["wrist_images"] for e in eps]))


def test_the_writer_goes_to_disk_a_batch_at_a_time_and_holds_no_more(tmp_path, monkeypatch):
    from datasets.arrow_writer import ArrowWriter

    eps = episodes(24, seed=1)
    size, total = max(episode_bytes(e) for e in eps), sum(episode_bytes(e) for e in eps)
    written = []
    original = ArrowWriter.write_table

    def counted(self, table, *args, **kwargs):
        written.append(table.num_rows)
        return original(self, table, *args, **kwargs)

    monkeypatch.setattr(ArrowWriter, "write_table", counted)
    with dataset_writer(tmp_path / "d", meta_of(eps), batch_mb=4 * size / 2**20) as writer:
        for ep in eps:
            writer.add(ep)
            assert sum(episode_bytes(e) for e in writer._pending) < 4 * size  # a full batch went to disk
        writer.finish(writer.tally.meta(meta_of(eps)))
    assert len(written) >= total / (5 * size) > 1 and sum(written) == sum(e.length for e in eps)
    assert arrow_files(tmp_path / "d") == ["data-00000-of-00001.arrow"] and read_meta(tmp_path / "d").episodes == 24


def test_an_unfinished_or_miscounted_write_leaves_nothing(tmp_path):
    eps = episodes(3)
    with pytest.raises(RuntimeError, match="the writer was not finished"):
        with dataset_writer(tmp_path / "d", meta_of(eps), shard_mb=1e-6, batch_mb=1e-6) as writer:
            for ep in eps:
                writer.add(ep)  # each one in a file of its own on disk already
    with pytest.raises(ValueError, match="would say episodes 4 \\(written: 3\\)"):
        write_dataset(tmp_path / "d", eps, dataclasses.replace(meta_of(eps), episodes=4))
    with pytest.raises(ValueError, match="no episodes to write"):
        write_dataset(tmp_path / "d", iter([]), meta_of(eps))
    with pytest.raises(ValueError, match="shard_mb must be > 0"):
        write_dataset(tmp_path / "d", eps, meta_of(eps), shard_mb=0)
    with pytest.raises(ValueError, match="batch_mb must be > 0"):
        write_dataset(tmp_path / "d", eps, meta_of(eps), batch_mb=-1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("data_format", ["arrow", "lerobot"])
def test_collect_holds_a_round_and_a_shard_of_episodes_not_the_dataset(tmp_path, monkeypatch, data_format):
    """Episodes alive when each round starts: the old collect kept every one until the end."""
    import embodied.data.format as fmt
    import embodied.workers.env_worker as env_worker

    alive: list[weakref.ref] = []
    seen: list[int] = []

    class Tracked(DemoEpisode):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            alive.append(weakref.ref(self))

    original = env_worker.EnvWorker.collect_round

    def counted(self, *args, **kwargs):
        gc.collect()
        seen.append(sum(r() is not None for r in alive))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(env_worker, "DemoEpisode", Tracked)
    monkeypatch.setattr(env_worker.EnvWorker, "collect_round", counted)
    # Reach episodes here are 1-3 chunk steps of 124 bytes: a 1000-byte batch holds at most 8 of them.
    monkeypatch.setattr(fmt, "BATCH_MB", 1000 / 2**20)
    monkeypatch.setattr(fmt, "SHARD_MB", 3000 / 2**20)
    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=4", "policy.action_chunk=4", "env.max_episode_steps=30"])
    report = collect(cfg, episodes=40, out=tmp_path / "d", data_format=data_format)
    assert report.episodes == 40 and report.attempted >= 40 and len(seen) >= 10
    # One round (4 envs) just written, and a batch pending (arrow only); the old collect held all 36 here.
    assert max(seen) <= (4 + 8 if data_format == "arrow" else 4), seen
    if data_format == "arrow":
        assert len(arrow_files(tmp_path / "d")) >= 2
        data = DemoDataset(tmp_path / "d")
        assert len(set(data.episode_indices.tolist())) == 40 and len(data) == report.rows == data.meta.rows
        assert list(dict.fromkeys(load_seeds(tmp_path / "d"))) == list(range(cfg.experiment.seed,
                                                                               cfg.experiment.seed + 40))


def load_seeds(path: Path) -> list[int]:
    import datasets

    return datasets.load_from_disk(str(path)).with_format("numpy")[:]["seed"].tolist()

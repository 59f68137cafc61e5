"""``runner.keep_best``: the best-scored checkpoint survives rotation beside the newest ``keep_checkpoints``; a save
that fails prunes nothing and leaves the previous checkpoint loadable."""

from __future__ import annotations

import json

import pytest

import embodied.runs.train as runner
from embodied.checkpoint.store import (MANIFEST_FILE, best_checkpoint, checkpoints_in, load_checkpoint,
                                       prune_checkpoints, save_checkpoint)
from embodied.config import ConfigError, load_config
from tests.embodied.runs.test_resume import toy_config


def scored_run(tmp_path, scores: list[float | None]):
    for it, score in enumerate(scores, 1):
        state = {"iteration": it} | ({"score": {"eval/success_rate": score}} if score is not None else {})
        save_checkpoint(tmp_path / "checkpoints" / f"iter_{it:06d}", state)
    return checkpoints_in(tmp_path / "checkpoints")


def test_the_best_scored_checkpoint_survives_beside_the_newest(tmp_path):
    found = scored_run(tmp_path, [0.2, 0.9, None, 0.5, 0.9, 0.1])
    assert json.loads((found[1] / MANIFEST_FILE).read_text())["score"] == {"eval/success_rate": 0.9}
    assert best_checkpoint(found, "eval/success_rate") == found[4]  # ties: the newest
    assert best_checkpoint(found, "eval/success_rate", mode="min") == found[5]
    assert best_checkpoint(found, "eval/return") is None  # never scored on it
    deleted = prune_checkpoints(tmp_path, 2, "eval/success_rate")
    assert [p.name for p in checkpoints_in(tmp_path / "checkpoints")] == ["iter_000005", "iter_000006"]
    assert len(deleted) == 4
    found = scored_run(tmp_path / "b", [0.9, 0.2, 0.3])
    prune_checkpoints(tmp_path / "b", 1, "eval/success_rate")
    assert [p.name for p in checkpoints_in(tmp_path / "b" / "checkpoints")] == ["iter_000001", "iter_000003"]
    prune_checkpoints(tmp_path / "b", 1)  # without keep_best: the newest alone
    assert [p.name for p in checkpoints_in(tmp_path / "b" / "checkpoints")] == ["iter_000003"]


def test_a_run_keeps_its_best_eval_and_its_newest_checkpoint(tmp_path):
    result = runner.train(toy_config(tmp_path, "runner.iterations=4", "runner.eval_every=1", "runner.keep_checkpoints=1",
                                     "runner.keep_best=eval/return", "runner.keep_best_mode=min"))
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    returns = {row["step"]: row["eval/return"] for row in rows if "eval/return" in row}
    best = min(sorted(returns), key=lambda it: (returns[it], -it))  # lowest is best here; ties: the newest
    assert best != 4  # else the newest alone would pass
    kept = {p.name for p in checkpoints_in(result.run_dir / "checkpoints")}
    assert kept == {f"iter_{best:06d}", "iter_000004"}
    assert load_checkpoint(result.run_dir / "checkpoints" / f"iter_{best:06d}")["iteration"] == best


def test_a_failed_save_prunes_nothing_and_the_previous_checkpoint_still_loads(tmp_path, monkeypatch):
    import embodied.workers.actor_worker as actor_worker

    real, calls = actor_worker.save_policy_checkpoint, []

    def fails_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("a writer that raises")
        return real(*args, **kwargs)

    monkeypatch.setattr(actor_worker, "save_policy_checkpoint", fails_the_second)
    with pytest.raises(OSError, match="a writer that raises"):
        runner.train(toy_config(tmp_path, "runner.iterations=3", "runner.keep_checkpoints=1"))
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert [p.name for p in checkpoints_in(run_dir / "checkpoints")] == ["iter_000001"]
    assert load_checkpoint(run_dir / "checkpoints" / "iter_000001")["iteration"] == 1
    assert not [p for p in (run_dir / "checkpoints").iterdir() if ".tmp" in p.name]  # no half-written folder


def test_keep_best_needs_a_checkpoint_at_every_scored_eval():
    with pytest.raises(ConfigError, match="runner.keep_best: a checkpoint is scored by the eval of its own iteration"):
        load_config(None, ["runner.keep_best=eval/success_rate", "runner.checkpoint_every=5", "runner.eval_every=2"])
    assert load_config(None, ["runner.keep_best=eval/success_rate", "runner.checkpoint_every=10",
                              "runner.eval_every=5"]).runner.keep_best == "eval/success_rate"

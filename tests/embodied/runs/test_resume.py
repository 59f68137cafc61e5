"""Resuming: a run continues from its checkpoint's iteration, parameters, optimizer and wandb run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import find_checkpoint, load_checkpoint, load_resume_point, run_dir_of
from embodied.config import load_config
from embodied.logging.logger import WANDB_ID_FILE

COUNTING = "tests.toy_envs:CountingEnv"


def toy_config(tmp_path: Path, *overrides: str):
    """A seconds-long PPO run on CountingEnv with a small MLP, checkpointing every iteration."""
    return load_config(None, [
        f"env.id={COUNTING}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "runner.iterations=2", "runner.eval_every=0",
        "runner.eval_episodes=2", "runner.checkpoint_every=1", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", f"experiment.output_dir={tmp_path}", *overrides,
    ])


def assert_same_state(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def test_a_resumed_run_continues_from_the_saved_iteration_with_identical_parameters(tmp_path, monkeypatch):
    first = runner.train(toy_config(tmp_path))
    saved = load_checkpoint(first.checkpoint)
    assert saved["iteration"] == 2
    seen: list[tuple[int, dict]] = []
    original = runner.train_iteration

    def spy(workers, cfg, it):
        seen.append((it, copy.deepcopy(workers.actor_state())))  # the actor as the iteration finds it
        return original(workers, cfg, it)

    monkeypatch.setattr(runner, "train_iteration", spy)
    resumed = runner.train(toy_config(tmp_path, "runner.iterations=4", f"runner.resume_from={first.run_dir}"))
    assert resumed.run_dir == first.run_dir  # same run dir, no new one
    assert [it for it, _ in seen] == [3, 4]
    assert_same_state(seen[0][1], saved["actor"])  # policy, optimizer and version as saved
    final = load_checkpoint(resumed.checkpoint)
    assert resumed.checkpoint == first.run_dir / "checkpoints" / "iter_000004"
    assert final["iteration"] == 4 and final["actor"]["version"] == 4
    assert final["env_steps"] == resumed.history[-1]["env_steps"] > resumed.history[0]["env_steps"] > saved["env_steps"]
    steps = [json.loads(line)["step"] for line in (first.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.run_dir.name]


def test_resume_from_a_checkpoint_file_drops_metrics_logged_after_it(tmp_path):
    first = runner.train(toy_config(tmp_path, "runner.iterations=3"))
    ckpt = first.run_dir / "checkpoints" / "iter_000002"
    resumed = runner.train(toy_config(tmp_path, "runner.iterations=3", f"runner.resume_from={ckpt}"))
    assert [m["env_steps"] for m in resumed.history] == [first.history[2]["env_steps"]]
    steps = [json.loads(line)["step"] for line in (first.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_resume_continues_the_wandb_run(tmp_path, fake_wandb):
    first = runner.train(toy_config(tmp_path, "logger.backends=[wandb]"))
    run_id = (first.run_dir / WANDB_ID_FILE).read_text().strip()
    assert load_checkpoint(first.checkpoint)["wandb_id"] == run_id
    runner.train(toy_config(tmp_path, "logger.backends=[wandb]", "runner.iterations=3",
                            f"runner.resume_from={first.run_dir}"))
    assert [(r.init_kwargs["id"], r.init_kwargs["resume"]) for r in fake_wandb.runs()] == [(run_id, "allow")] * 2


def test_checkpoint_lookup(tmp_path):
    from embodied.checkpoint.store import save_checkpoint

    for it in (2, 10, 9):
        save_checkpoint(tmp_path / "checkpoints" / f"iter_{it:06d}", {"iteration": it})
    (tmp_path / "checkpoints" / "iter_000011.tmp123").mkdir()  # a write that never finished is not a checkpoint
    (tmp_path / "checkpoints" / "iter_000011.tmp123" / "trainer.pt").write_bytes(b"")
    assert find_checkpoint(tmp_path).name == "iter_000010"
    assert find_checkpoint(tmp_path / "checkpoints").name == "iter_000010"
    assert run_dir_of(find_checkpoint(tmp_path)) == tmp_path
    with pytest.raises(FileNotFoundError, match="neither a checkpoint nor a run directory"):
        find_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        find_checkpoint(tmp_path / "empty")


def test_a_checkpoint_without_training_state_cannot_be_resumed(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"actor": {}}, path)
    with pytest.raises(ValueError, match="lacks \\['iteration', 'env_steps'\\]"):
        load_resume_point(path)


EXACT = ["env.id=Reach-v0", "env.num_envs=4", "eval_env.num_envs=2", "policy.hidden_sizes=[16]",
         "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=2", "algorithm.update_epochs=2",
         "runner.iterations=4", "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=0",
         "logger.backends=[]", "runner.plot=false", "env.preflight=false", "experiment.seed=3"]


def stop_then_resume(tmp_path, monkeypatch, at: int, *extra: str):
    """Train EXACT, stopped by a SIGTERM during iteration ``at``, then resumed to the end."""
    import os
    import signal

    original = runner.train_iteration

    def stop(workers, cfg, it):
        if it == at:
            os.kill(os.getpid(), signal.SIGTERM)  # the run finishes this iteration, checkpoints and stops
        return original(workers, cfg, it)

    with monkeypatch.context() as patch:
        patch.setattr(runner, "train_iteration", stop)
        stopped = runner.train(load_config(None, [*EXACT, *extra, f"experiment.output_dir={tmp_path}"]))
    assert stopped.interrupted == "SIGTERM" and stopped.checkpoint.name == f"iter_{at:06d}"
    return runner.train(load_config(None, [*EXACT, *extra, f"experiment.output_dir={tmp_path}",
                                           f"runner.resume_from={stopped.run_dir}"]))


def same_weights(a, b) -> bool:
    pa, pb = load_checkpoint(a.checkpoint)["actor"]["policy"], load_checkpoint(b.checkpoint)["actor"]["policy"]
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def test_stop_and_resume_equals_one_run_to_the_last_bit(tmp_path, monkeypatch):
    one_go = runner.train(load_config(None, [*EXACT, f"experiment.output_dir={tmp_path / 'one'}"]))
    resumed = stop_then_resume(tmp_path / "two", monkeypatch, at=2)  # N=2, then M=2; episodes span the stop
    assert same_weights(one_go, resumed)
    keys = ["env/return", "env/episodes", "train/loss", "train/approx_kl", "env_steps"]
    np.testing.assert_array_equal([[m[k] for k in keys] for m in resumed.history],  # NaN: no episode ended
                                  [[m[k] for k in keys] for m in one_go.history[2:]])
    # The envs' mid-episode state is what makes it exact: restarting them from their seeds does not repeat.
    from embodied.workers.group import Workers

    monkeypatch.setattr(Workers, "restore", lambda self, state: ["envs not restored (test)"])
    with pytest.warns(UserWarning, match="resume is not exact: envs not restored"):
        reseeded = stop_then_resume(tmp_path / "three", monkeypatch, at=2)
    assert not same_weights(one_go, reseeded)


@pytest.mark.ray
def test_stop_and_resume_on_ray_equals_one_run_to_the_last_bit(tmp_path, monkeypatch, ray_session):
    """The run in one go is on the local backend with Ray's placement (disaggregated), which gives Ray's bits."""
    two = ["cluster.num_env_workers=2", "cluster.placement=disaggregated"]
    one_go = runner.train(load_config(None, [*EXACT, *two, f"experiment.output_dir={tmp_path / 'one'}"]))
    assert same_weights(one_go, stop_then_resume(tmp_path / "two", monkeypatch, 2, "cluster.backend=ray", *two))

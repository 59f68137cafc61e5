"""configs/reach_mlp_sac.yaml trained a few iterations for real: finite losses, Q-values that move, replay in the
checkpoint, and a stopped-and-resumed run that ends on the weights of one run in one go."""

from __future__ import annotations

import errno
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import find_checkpoint, load_checkpoint
from embodied.config import load_config
from embodied.core.atomic import DiskFullError
from embodied.runs.train import train

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "reach_mlp_sac.yaml"
SHORT = ["runner.iterations=4", "env.num_envs=4", "eval_env.num_envs=4", "runner.eval_episodes=4",
         "rollout.chunk_steps=4", "runner.eval_every=2", "runner.checkpoint_every=2", "logger.progress_bar=false",
         "algorithm.learning_starts=16", "algorithm.batch_size=16", "policy.hidden_sizes=[32]",
         "algorithm.critic_hidden_sizes=[32]", "algorithm.num_critics=3", "algorithm.critic_layernorm=true"]


@pytest.mark.slow
def test_short_sac_run(tmp_path):
    cfg = load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    assert len(result.history) == 4
    for metrics in result.history:
        for key in ("sac/q_loss", "sac/policy_loss", "sac/alpha", "sac/entropy", "sac/q_mean", "replay/size"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
        assert metrics["offpolicy/updates"] == 16  # utd_ratio 1 x 4 envs x 4 chunk steps
    assert [m["replay/size"] for m in result.history] == [16, 32, 48, 64]
    # Overlap: epoch 2 ran during update 1 with the weights from before it (16 updates stale); iteration 2 ends in a
    # checkpoint, so epoch 3 started after it with fresh weights; epoch 4 ran during update 3.
    assert [m["offpolicy/staleness"] for m in result.history] == [0, 16, 0, 16]
    assert [m["offpolicy/overlap"] for m in result.history] == [1, 0, 1, 0]
    q_means = [m["sac/q_mean"] for m in result.history]
    assert len(set(q_means)) == 4, q_means  # the critics learn
    assert 0.0 <= result.final_eval["eval/success_rate"] <= 1.0
    actor = load_checkpoint(result.checkpoint)["actor"]
    replay = json.loads((result.checkpoint / "replay" / "replay.json").read_text())
    assert actor["version"] == 64 and actor["replay_dir"] == str(result.checkpoint / "replay")
    assert replay["size"] == 64 and sum(c["rows"] for c in replay["chunks"]) == 64
    assert set(actor["sac"]) >= {"critics", "target_critics", "log_alpha", "critic_optimizer"}


def weights(result) -> dict[str, torch.Tensor]:
    """Every weight a checkpoint of a SAC run holds: the policy's, and the learner's critics and targets."""
    actor = load_checkpoint(result.checkpoint)["actor"]
    learned = {f"{part}.{k}": v for part in ("critics", "target_critics", "target_encoder")
               for k, v in actor["sac"][part].items()}
    return {**{f"policy.{k}": v for k, v in actor["policy"].items()}, **learned}


def resume_midway(one_go, out: Path, overrides: list[str]):
    """The run ``one_go`` as if it had stopped after its iteration-2 checkpoint (a copy of its run dir without the
    later checkpoint), resumed from there to the end."""
    stopped = out / one_go.run_dir.name
    shutil.copytree(one_go.run_dir, stopped)
    shutil.rmtree(stopped / "checkpoints" / "iter_000004")
    resumed = train(load_config(RECIPE, [*overrides, f"experiment.output_dir={out}",
                                         f"runner.resume_from={stopped / 'checkpoints' / 'iter_000002'}"]))
    assert resumed.run_dir == stopped and len(resumed.history) == 2
    return resumed


@pytest.mark.slow
@pytest.mark.parametrize("overlap, n_step", [("true", 3), ("false", 1)])
def test_resumed_sac_run_equals_one_run(tmp_path, overlap, n_step):
    short = [*SHORT, f"algorithm.overlap={overlap}", f"algorithm.n_step={n_step}"]
    one_go = train(load_config(RECIPE, [*short, f"experiment.output_dir={tmp_path / 'one'}"]))
    resumed = resume_midway(one_go, tmp_path / "stopped", short)
    a, b = weights(one_go), weights(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert [m["sac/q_loss"] for m in one_go.history[2:]] == [m["sac/q_loss"] for m in resumed.history]


@pytest.mark.slow
def test_two_actor_ranks_on_ray_train_overlapped(tmp_path, ray_session):
    """SAC end to end on Ray: two actor ranks (gloo), each with its rollout rank's share of replay (n-step rows), and
    the next epoch overlapping the updates; the ranks end on the same weights, which each checkpoint holds with each
    rank's replay as chunk files; resumed from the run's mid-way checkpoint (a copy of the run stopped there), the
    run ends on the weights of the run in one go."""
    ranks = [*SHORT, "cluster.backend=ray", "actor.num_ranks=2", "cluster.num_rollout_workers=2", "algorithm.n_step=2"]
    one_go = train(load_config(RECIPE, [*ranks, f"experiment.output_dir={tmp_path / 'one'}"]))
    assert len(one_go.history) == 4
    assert [m["replay/size"] for m in one_go.history] == [16, 32, 48, 64]  # both ranks' shares
    assert [m["offpolicy/updates"] for m in one_go.history] == [16] * 4
    assert [m["offpolicy/overlap"] for m in one_go.history] == [1, 0, 1, 0] and one_go.history[1]["offpolicy/staleness"] == 16
    midway = one_go.run_dir / "checkpoints" / "iter_000002"
    actor = load_checkpoint(midway)["actor"]
    assert actor["version"] == 32 and len(actor["rank_shares"]) == 2
    assert not any("replay" in share for share in actor["rank_shares"])  # not in trainer.pt: as chunk files
    shares = [json.loads((midway / "replay" / f"rank_{r}" / "replay.json").read_text()) for r in (0, 1)]
    assert [share["size"] for share in shares] == [16, 16]
    resumed = resume_midway(one_go, tmp_path / "stopped", ranks)
    a, b = weights(one_go), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert [m["sac/q_loss"] for m in one_go.history[2:]] == [m["sac/q_loss"] for m in resumed.history]


@pytest.mark.slow
def test_a_stop_the_schedule_did_not_foresee_records_the_overlapped_epoch(tmp_path, monkeypatch):
    import os
    import signal

    from embodied.workers.actor_worker import ActorWorker

    real_update = ActorWorker.update

    def update_then_stop(self, trajectories, iteration):
        out = real_update(self, trajectories, iteration)
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # graceful stop after this iteration, whose next epoch already runs
        return out

    monkeypatch.setattr(ActorWorker, "update", update_then_stop)
    result = train(load_config(RECIPE, [*SHORT, "runner.checkpoint_every=0", f"experiment.output_dir={tmp_path}"]))
    assert result.interrupted == "SIGTERM" and len(result.history) == 2
    saved = load_checkpoint(result.checkpoint)
    assert saved["iteration"] == 2 and saved["env_steps"] == 2 * 4 * 4 * 4  # the epoch in flight is not counted
    assert saved["rollouts_in_flight"] == 1 and result.discarded == 1


@pytest.mark.slow
def test_a_full_disk_while_checkpointing_replay_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """keep_checkpoints=1: the failed write of iteration 4's replay names the path and deletes nothing; the run
    resumes from iteration 2's checkpoint and ends on one run's weights."""
    from embodied.replay import buffer as replay_module

    write = replay_module._write_chunk

    def full_on_the_second_checkpoint(path, parts):
        if "iter_000004" in str(path.parent.parent):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, parts)

    monkeypatch.setattr(replay_module, "_write_chunk", full_on_the_second_checkpoint)
    cfg = load_config(RECIPE, [*SHORT, "runner.keep_checkpoints=1", f"experiment.output_dir={tmp_path / 'two'}"])
    with pytest.raises(DiskFullError, match=r"no space left on device writing checkpoint \S*iter_000004"):
        train(cfg)
    run_dir = next((tmp_path / "two").iterdir())
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_000002"]
    assert find_checkpoint(run_dir).name == "iter_000002"
    monkeypatch.undo()
    resumed = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'two'}",
                                         f"runner.resume_from={run_dir}"]))
    one_go = train(load_config(RECIPE, [*SHORT, f"experiment.output_dir={tmp_path / 'one'}"]))
    a, b = weights(one_go), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]

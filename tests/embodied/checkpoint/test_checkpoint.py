"""Checkpoints: manifests, checksums, the newest *valid* one as latest, weights_only loading,
temp-folder cleanup, ``keep_checkpoints``, and refusing a checkpoint of another env."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import (FORMAT_VERSION, MANIFEST_FILE, TRAINER_FILE, CheckpointError, find_checkpoint,
                                       load_checkpoint, load_resume_point, save_checkpoint)
from embodied.config import ConfigError
from tests.embodied.runs.test_resume import toy_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 3-iteration run with a checkpoint per iteration."""
    return runner.train(toy_config(tmp_path_factory.mktemp("run"), "runner.iterations=3"))


def copy_run(trained, tmp_path):
    import shutil

    run_dir = tmp_path / trained.run_dir.name
    shutil.copytree(trained.run_dir, run_dir)
    return run_dir


def test_a_checkpoint_has_a_manifest_with_versions_env_spaces_and_checksums(trained):
    manifest = json.loads((trained.checkpoint / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == FORMAT_VERSION and manifest["iteration"] == 3
    assert manifest["components"] == [TRAINER_FILE]
    assert manifest["packages"]["torch"] == torch.__version__
    assert manifest["env"]["id"] == "tests.toy_envs:CountingEnv"
    assert manifest["env"]["spaces"]["action_dim"] == 2 and manifest["policy_type"] == "mlp"
    assert set(manifest["sha256"]) == {TRAINER_FILE} and len(manifest["sha256"][TRAINER_FILE]) == 64


def test_a_truncated_latest_checkpoint_is_skipped_for_the_previous_one(trained, tmp_path):
    run_dir = copy_run(trained, tmp_path)
    latest = run_dir / "checkpoints" / "iter_000003" / TRAINER_FILE
    latest.write_bytes(latest.read_bytes()[:100])  # cut off, as a crash mid-copy would leave it
    with pytest.warns(UserWarning, match="skipping checkpoint iter_000003: .*trainer.pt: checksum mismatch"):
        assert find_checkpoint(run_dir).name == "iter_000002"
    with pytest.raises(CheckpointError, match="iter_000003/trainer.pt: checksum mismatch"):
        load_checkpoint(latest.parent)  # named explicitly: an error, no silent fallback
    with pytest.warns(UserWarning, match="skipping checkpoint iter_000003"):
        resume = load_resume_point(run_dir)
    assert resume.iteration == 2


def test_a_checkpoint_with_non_finite_weights_is_never_latest(trained, tmp_path):
    run_dir = copy_run(trained, tmp_path)
    folder = run_dir / "checkpoints" / "iter_000003"
    state = torch.load(folder / TRAINER_FILE, weights_only=True)
    next(iter(state["actor"]["policy"].values())).fill_(float("nan"))
    (folder / MANIFEST_FILE).unlink()  # a format-1 folder: nothing but the weights to judge it by
    torch.save(state, folder / TRAINER_FILE)
    with pytest.warns(UserWarning, match="skipping checkpoint iter_000003: .*weights are not finite"):
        assert find_checkpoint(run_dir).name == "iter_000002"


def test_saving_non_finite_weights_is_refused(tmp_path):
    from embodied.checkpoint.store import save_policy_checkpoint
    from embodied.policy.base import PolicySpec

    policy = torch.nn.Linear(2, 2)
    policy.exports_pretrained = False
    with torch.no_grad():
        policy.weight[0, 0] = float("inf")
    spec = PolicySpec(2, None, 2, (-1.0, -1.0), (1.0, 1.0))
    with pytest.raises(CheckpointError, match="not writing checkpoint .*weights are not finite \\(weight\\)"):
        save_policy_checkpoint(tmp_path / "iter_000001", policy, torch.optim.Adam(policy.parameters()), 1, spec, {})
    assert not list(tmp_path.iterdir())


class Payload:
    """Any pickled object of a class: ``weights_only`` refuses to run its code."""


def test_checkpoints_load_with_weights_only_and_name_a_bad_file(tmp_path):
    folder = tmp_path / "iter_000001"
    folder.mkdir()
    torch.save({"iteration": 1, "actor": {"thing": Payload()}}, folder / TRAINER_FILE)
    with pytest.raises(CheckpointError, match=f"{folder / TRAINER_FILE}: not a readable checkpoint"):
        load_checkpoint(folder)
    (folder / TRAINER_FILE).write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(folder)
    save_checkpoint(folder, {"iteration": 1})
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest | {"format_version": FORMAT_VERSION + 1}))
    with pytest.raises(CheckpointError, match=f"checkpoint format {FORMAT_VERSION + 1} is newer than this embodied reads"):
        load_checkpoint(folder)


def test_a_killed_write_is_cleaned_up_at_the_next_start_and_keep_checkpoints_bounds_disk(tmp_path):
    first = runner.train(toy_config(tmp_path, "runner.iterations=2"))
    leftover = first.run_dir / "checkpoints" / "iter_000003.tmp4242"
    leftover.mkdir()
    (leftover / TRAINER_FILE).write_bytes(b"half")
    with pytest.warns(UserWarning, match="removed .*iter_000003.tmp4242: a checkpoint write that did not finish"):
        resumed = runner.train(toy_config(tmp_path, "runner.iterations=6", "runner.keep_checkpoints=2",
                                          f"runner.resume_from={first.run_dir}"))
    assert not leftover.exists()
    assert sorted(p.name for p in (resumed.run_dir / "checkpoints").iterdir()) == ["iter_000005", "iter_000006"]


def test_resume_auto_continues_the_newest_run_of_the_experiment(tmp_path, capsys):
    fresh = runner.train(toy_config(tmp_path, "runner.resume_from=auto", "experiment.name=auto"))
    assert "no earlier run of 'auto' with a checkpoint" in capsys.readouterr().out
    resumed = runner.train(toy_config(tmp_path, "runner.resume_from=auto", "experiment.name=auto",
                                      "runner.iterations=3"))
    assert resumed.run_dir == fresh.run_dir and len(resumed.history) == 1  # iteration 3 only
    assert f"continuing {fresh.run_dir}" in capsys.readouterr().out


def test_resume_and_eval_refuse_a_checkpoint_of_another_env(trained, tmp_path):
    from embodied.evaluation.run import evaluate_checkpoint

    other = "tests.toy_envs:FailingEnv"
    with pytest.raises(ConfigError, match="runner.resume_from: checkpoint does not fit: it was trained on "
                                          "tests.toy_envs:CountingEnv, this config's env is " + other):
        runner.train(toy_config(tmp_path, f"env.id={other}", f"runner.resume_from={trained.run_dir}"))
    assert not any(tmp_path.iterdir())  # refused before any run dir
    cfg = toy_config(tmp_path, f"eval_env.id={other}")
    with pytest.raises(CheckpointError, match="it was trained on tests.toy_envs:CountingEnv"):
        evaluate_checkpoint(cfg, trained.checkpoint, 2, tmp_path / "eval")


def test_eval_refuses_a_checkpoint_whose_spaces_differ_naming_the_field(trained, tmp_path):
    from embodied.evaluation.run import evaluate_checkpoint

    state = load_checkpoint(trained.checkpoint)
    state["policy_spec"]["action_low"] = [-2.0, -2.0]
    save_checkpoint(tmp_path / "iter_000003", state)
    with pytest.raises(CheckpointError, match=r"action_low is \[-2.0, -2.0\] in the checkpoint, \[-10.0, -10.0\] in"):
        evaluate_checkpoint(toy_config(tmp_path), tmp_path / "iter_000003", 2, tmp_path / "eval")

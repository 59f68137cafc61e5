"""``policy.init_from``: training starts from another run's policy (e.g. SFT's), if it fits."""

from __future__ import annotations

import pytest
import torch

import embodied.runs.train as runner
from embodied.checkpoint.store import check_init_from, load_checkpoint
from embodied.config import ConfigError
from embodied.policies.vla.configuration import VLAConfig
from tests.embodied.runs.test_resume import toy_config


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    return runner.train(toy_config(tmp_path_factory.mktemp("first"), "runner.iterations=1"))


def test_training_starts_from_the_named_policy(tmp_path, first, monkeypatch):
    seen = {}
    original = runner.train_iteration

    def spy(workers, cfg, it):
        seen.setdefault("policy", {k: v.clone() for k, v in workers.actor_state()["policy"].items()})
        return original(workers, cfg, it)

    monkeypatch.setattr(runner, "train_iteration", spy)
    runner.train(toy_config(tmp_path, "runner.iterations=1", f"policy.init_from={first.run_dir}"))
    saved = load_checkpoint(first.checkpoint)["actor"]["policy"]
    assert all(torch.equal(seen["policy"][k], saved[k]) for k in saved)


def test_a_checkpoint_of_another_chunk_length_is_refused_before_any_worker(tmp_path, first):
    with pytest.raises(ConfigError, match="its policy.action_chunk is 2, this config's is 3"):
        runner.train(toy_config(tmp_path, "policy.action_chunk=3", f"policy.init_from={first.checkpoint}"))
    assert not list(tmp_path.iterdir())  # no run directory was made


def test_a_checkpoint_of_another_policy_type_is_refused(first):
    with pytest.raises(ValueError, match="it holds a policy.type='mlp' policy, this config trains 'vla'"):
        check_init_from(str(first.run_dir), VLAConfig(action_chunk=2))


def test_a_checkpoint_of_another_action_dimension_names_both(tmp_path, first):
    with pytest.raises(Exception, match="acts in 2 action dimensions, the env in 3"):
        runner.train(toy_config(tmp_path, "env.kwargs={action_dim: 3}", f"policy.init_from={first.checkpoint}"))


def test_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(ConfigError, match="policy.init_from: .*nope"):
        runner.train(toy_config(tmp_path, f"policy.init_from={tmp_path / 'nope'}"))


def _first_actor_state(monkeypatch) -> dict:
    """Spy on ``train_iteration``: the actor's policy as the first iteration finds it."""
    seen: dict = {}
    original = runner.train_iteration

    def spy(workers, cfg, it):
        seen.setdefault("policy", {k: v.clone() for k, v in workers.actor_state()["policy"].items()})
        return original(workers, cfg, it)

    monkeypatch.setattr(runner, "train_iteration", spy)
    return seen


def test_init_from_log_std_widens_the_loaded_gaussian_and_keeps_every_other_weight(tmp_path, first, monkeypatch):
    seen = _first_actor_state(monkeypatch)
    runner.train(toy_config(tmp_path, "runner.iterations=1", f"policy.init_from={first.run_dir}",
                            "policy.init_from_log_std=-0.25"))
    saved = load_checkpoint(first.checkpoint)["actor"]["policy"]
    assert not torch.allclose(saved["log_std"], torch.tensor(-0.25))  # the first run trained its own
    assert torch.equal(seen["policy"]["log_std"], torch.full_like(saved["log_std"], -0.25))
    assert all(torch.equal(seen["policy"][k], saved[k]) for k in saved if k != "log_std")


def test_a_resumed_run_keeps_its_trained_log_std_rather_than_reset_it(tmp_path, first, monkeypatch):
    start = runner.train(toy_config(tmp_path, "runner.iterations=1", f"policy.init_from={first.run_dir}",
                                    "policy.init_from_log_std=-0.25"))
    trained = load_checkpoint(start.checkpoint)["actor"]["policy"]["log_std"]
    assert not torch.allclose(trained, torch.tensor(-0.25))  # PPO's step moved it
    seen = _first_actor_state(monkeypatch)
    runner.train(toy_config(tmp_path, "runner.iterations=2", f"policy.init_from={first.run_dir}",
                            "policy.init_from_log_std=-0.25", f"runner.resume_from={start.run_dir}"))
    assert torch.equal(seen["policy"]["log_std"], trained)


def test_init_from_log_std_without_init_from_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match="policy.init_from_log_std: .*no policy.init_from is set"):
        runner.train(toy_config(tmp_path, "policy.init_from_log_std=-0.5"))
    assert not list(tmp_path.iterdir())

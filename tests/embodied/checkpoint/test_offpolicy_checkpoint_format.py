"""Off-policy checkpoints written before algorithms were plug-ins still resume.

Until then the off-policy actor worker named SAC itself and wrote the learner's state under the literal keys
``"sac"`` (critics, targets, temperature, optimizers, stream), ``"sac_counters"`` (the UTD pacing) and, per rank,
``"sac_generator"``. The worker now writes ``<learner.name>``, ``<learner.name>_counters`` and
``<learner.name>_generator``; SAC's (and DSRL's) learner is named ``sac``, so those checkpoints are read as they are.
Two checkpoints of that layout must resume: one assembled by hand (literal keys, not the worker's own ``_extra``),
written with the checkpoint writer and replay's chunk files, and one the code of commit 3809b96 (before the change)
wrote, kept in ``fixtures/sac_checkpoint_3809b96/`` beside the metrics that code logged on its next update
(``sac_checkpoint_3809b96.next_update.json``). It was made on that commit's tree as::

    first = actor("algorithm.utd_ratio=0.5")          # tests/embodied/runs/test_offpolicy.py's tiny Reach SAC
    first.update([transitions(T=4)], 1)
    first.update([transitions(T=1, seed=3)], 2)
    first.save_checkpoint(FIXTURE, {"iteration": 2, "env_steps": 0})
    json.dump(first.update([transitions(seed=5)], 3), ...)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from embodied.checkpoint.store import REPLAY_DIR, load_checkpoint, save_policy_checkpoint
from tests.embodied.runs.test_offpolicy import SPEC, actor, transitions

# The actor entry of an off-policy checkpoint of one rank, as commit 3809b96 wrote it (besides policy/optimizer).
LEGACY_LEARNER_KEYS = {"sac", "sac_counters"}
LOOP = {"updates", "updates_total", "critic_warmup", "transitions_received", "utd_ratio", "staleness"}
FIXTURE = Path(__file__).parent / "fixtures" / "sac_checkpoint_3809b96"


def write_legacy_checkpoint(worker, path):
    """``worker``'s state as a pre-plug-in checkpoint folder: trainer.pt with the learner under ``"sac"``."""
    learner_state = worker.learner.state_dict()
    training = worker.training
    actor_extra = {"sac": learner_state, "sac_counters": {"received": training.received, "owed": training.owed},
                   "generator": training.generator.get_state()}
    save_policy_checkpoint(path, worker.policy, worker.optimizer, worker.version, SPEC,
                           {"iteration": 1, "env_steps": 0}, actor_extra,
                           lambda tmp: worker.training.replay.save(tmp / REPLAY_DIR, previous=None))
    return path


def test_the_learner_is_saved_under_the_keys_it_always_had(tmp_path):
    worker = actor()
    worker.update([transitions(T=4)], 1)
    assert worker.learner.name == "sac"
    path = tmp_path / "iter_000001"
    worker.save_checkpoint(str(path), {"iteration": 1, "env_steps": 0})
    assert LEGACY_LEARNER_KEYS <= set(load_checkpoint(path)["actor"])


@pytest.mark.parametrize("overrides", [(), ("algorithm.utd_ratio=0.5",)])
def test_a_checkpoint_in_the_pre_plug_in_layout_resumes_exactly(tmp_path, overrides):
    first = actor(*overrides)
    first.update([transitions(T=4)], 1)
    first.update([transitions(T=1, seed=3)], 2)  # a fraction of an update owed (utd 0.5 x 3)
    path = write_legacy_checkpoint(first, tmp_path / "checkpoints" / "iter_000001")
    state = load_checkpoint(path)["actor"]
    assert LEGACY_LEARNER_KEYS <= set(state) and "replay_dir" in state

    second = actor(*overrides)
    second.load_state(state)
    assert (second.version, second.training.received, second.training.owed) == (first.version, first.training.received, first.training.owed)
    assert len(second.training.replay) == len(first.training.replay)
    assert torch.equal(second.learner.log_alpha, first.learner.log_alpha)
    a, b = first.update([transitions(seed=5)], 3), second.update([transitions(seed=5)], 3)
    assert a == b
    for name, value in first.learner.critics.state_dict().items():
        assert torch.equal(value, second.learner.critics.state_dict()[name]), name
    for name, value in first.policy.state_dict().items():
        assert torch.equal(value, second.policy.state_dict()[name]), name


def test_a_checkpoint_the_code_before_the_change_wrote_resumes_and_logs_its_next_update():
    state = load_checkpoint(FIXTURE)["actor"]
    assert set(state) == {"generator", "optimizer", "policy", "replay_dir", "sac", "sac_counters", "version"}
    worker = actor("algorithm.utd_ratio=0.5")
    worker.load_state(state)
    assert (worker.version, worker.training.received, worker.training.owed, len(worker.training.replay)) == (7, 15, 0.5, 15)
    for name, value in state["sac"]["critics"].items():
        assert torch.equal(worker.learner.critics.state_dict()[name], value), name
    logged = json.loads((FIXTURE.parent / f"{FIXTURE.name}.next_update.json").read_text())
    logged["sac/policy_loss"] = logged.pop("sac/actor_loss")  # its name since SAC's actor is called the policy
    for key in [k for k in logged if k.split("/")[1] in LOOP]:  # the loop's own metrics are the engine's now
        logged[f"offpolicy/{key.split('/')[1]}"] = logged.pop(key)
    metrics = worker.update([transitions(seed=5)], 3)
    assert set(metrics) == set(logged)  # the same metrics, the learner's still "sac/..."
    for key, value in logged.items():  # the same numbers, to float rounding across machines
        assert math.isclose(metrics[key], value, rel_tol=1e-4, abs_tol=1e-6), (key, metrics[key], value)

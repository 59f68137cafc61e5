"""On-policy checkpoints written before the learner owned PPO's update loop still resume exactly.

Until commit 31b2849 ``ActorWorker.update`` ran PPO's epochs and minibatches itself and kept their random stream as
the actor entry's ``"generator"``. The stream is now the learner's (``PPO.state_dict``), saved under the same key
beside the worker's ``policy``, ``optimizer``, ``version`` and ``live_policy``, so the layout is unchanged. The
fixture ``fixtures/ppo_checkpoint_31b2849/`` is what that commit's code wrote, beside the trajectories of its next
update and the metrics and weights that update gave (equal to the bit on the machine that wrote them). It was made
on that commit's tree as::

    actor = ActorWorker(MLPConfig(action_chunk=2, hidden_sizes=[8], normalize_states=True), MLP_SPEC,
                        PPOConfig(update_epochs=2, num_minibatches=2, lr=1e-3), ActorConfig(ema_decay=0.5), 5, 0)
    epoch = lambda it: [rollout(actor.policy, mlp_obs(2, it * 10 + s), 3, it * 10 + s) for s in (1, 2)]
    actor.update(epoch(1), 1); actor.update(epoch(2), 2)
    actor.save_checkpoint(FIXTURE, {"iteration": 2, "env_steps": 0})
    next_update = actor.update(epoch(3), 3)      # its trajectories, metrics and weights kept beside

(``rollout``, ``mlp_obs`` and ``MLP_SPEC`` are ``tests/embodied/workers/test_actor_ranks.py``'s.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from embodied.algorithms.ppo_config import PPOConfig
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ActorConfig
from embodied.core.types import Trajectory
from embodied.policies.mlp.configuration import MLPConfig
from embodied.workers.actor_worker import ActorWorker
from tests.embodied.workers.test_actor_ranks import MLP_SPEC

FIXTURE = Path(__file__).parent / "fixtures" / "ppo_checkpoint_31b2849"


def actor() -> ActorWorker:
    return ActorWorker(MLPConfig(action_chunk=2, hidden_sizes=[8], normalize_states=True), MLP_SPEC,
                       PPOConfig(update_epochs=2, num_minibatches=2, lr=1e-3), ActorConfig(ema_decay=0.5), 5, 0)


def beside(suffix: str) -> Path:
    return FIXTURE.parent / f"{FIXTURE.name}.{suffix}"


def test_the_actor_entry_keeps_its_keys(tmp_path):
    worker = actor()
    worker.save_checkpoint(str(tmp_path / "iter_000000"), {"iteration": 0, "env_steps": 0})
    written = set(load_checkpoint(tmp_path / "iter_000000")["actor"])
    expected = {"generator", "live_policy", "optimizer", "policy", "version"}  # live_policy: actor.ema_decay
    assert written == set(load_checkpoint(FIXTURE)["actor"]) == expected


def test_a_checkpoint_the_code_before_the_change_wrote_resumes_to_the_bit():
    state = load_checkpoint(FIXTURE)["actor"]
    worker = actor()
    worker.load_state(state)
    assert worker.version == 2
    trajectories = [Trajectory(**fields) for fields in torch.load(beside("next_trajectories.pt"))]
    metrics = worker.update(trajectories, 3)
    logged = json.loads(beside("next_update.json").read_text())
    assert list(metrics) == list(logged)  # the same metric names, in the same order
    for key, value in logged.items():  # the same numbers, to float rounding across machines (a different
        assert math.isclose(metrics[key], value, rel_tol=1e-4, abs_tol=1e-6), (key, metrics[key], value)
    weights = torch.load(beside("next_weights.pt"))  # minibatch order would move them far more than that)
    for name, value in worker.policy.state_dict().items():
        torch.testing.assert_close(value, weights[name], rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")

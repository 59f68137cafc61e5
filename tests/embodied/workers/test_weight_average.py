"""``actor.ema_decay``: the actor keeps a moving average of the trained weights; evals and checkpoints' policy
use it, rollouts and updates the live weights, and a resumed run gets both back exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import embodied.runs.train as runner
from embodied.algorithms.ppo_config import PPOConfig
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ActorConfig, load_config
from embodied.evaluation.run import evaluate_checkpoint
from embodied.policies.cnn.configuration import CNNConfig
from embodied.policy.base import PolicySpec
from embodied.workers.actor_worker import ActorWorker
from tests.embodied.config.test_config import error_of
from tests.embodied.runs.test_resume import EXACT, stop_then_resume
from tests.embodied.workers.test_critic_warmup import rollout
from tests.policies import test_cnn


def cnn_actor(decay: float) -> ActorWorker:
    return ActorWorker(CNNConfig(action_chunk=test_cnn.C, **test_cnn.SMALL), test_cnn.WRIST,
                       PPOConfig(update_epochs=2, num_minibatches=2, anneal_lr=False, lr=1e-2),
                       ActorConfig(ema_decay=decay), total_iterations=2, seed=0)


def trained(actor: ActorWorker) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in actor.policy.named_parameters() if p.requires_grad}


def test_the_average_follows_every_optimizer_step_and_swaps_in_and_out_exactly():
    actor = cnn_actor(0.75)
    expected = trained(actor)  # the average starts at the initial weights
    step = actor.optimizer.step

    def step_then_track(*args, **kwargs):
        out = step(*args, **kwargs)
        for name, w in trained(actor).items():
            expected[name] = 0.75 * expected[name] + 0.25 * w
        return out

    actor.optimizer.step = step_then_track
    actor.update([rollout(actor.policy, test_cnn.obs(4))], iteration=1)  # 2 epochs x 2 minibatches: 4 steps
    live = trained(actor)
    assert actor.ema is not None
    for name in live:
        torch.testing.assert_close(actor.ema[name], expected[name], rtol=0, atol=1e-6)
        assert not torch.equal(actor.ema[name], live[name])

    state = actor.state()  # in memory, as a checkpoint holds it: the average as the policy, the live weights beside
    for name in live:
        assert torch.equal(state["policy"][name], actor.ema[name]) and torch.equal(state["live_policy"][name], live[name])
    assert all(torch.equal(w, live[n]) for n, w in trained(actor).items())

    actor.use_average(True)
    published = actor.weights()[1]
    assert published is not None
    for name in live:
        assert torch.equal(published[name], actor.ema[name])  # what an eval's rollout workers get
    with pytest.raises(RuntimeError, match="update while the policy holds the weight average"):
        actor.update([rollout(actor.policy, test_cnn.obs(4))], iteration=2)
    actor.use_average(False)
    assert all(torch.equal(w, live[n]) for n, w in trained(actor).items())  # the live weights, bit for bit


def test_without_a_decay_there_is_no_average_and_use_average_changes_nothing():
    actor = cnn_actor(0.0)
    before = trained(actor)
    actor.use_average(True)
    assert actor.ema is None and all(torch.equal(w, before[n]) for n, w in trained(actor).items())
    assert "live_policy" not in actor.state()


def test_checkpoints_hold_the_average_as_the_policy_and_resume_the_live_weights_exactly(tmp_path, monkeypatch):
    ema = ["actor.ema_decay=0.5", "runner.eval_every=4", "runner.eval_episodes=4"]
    one_go = runner.train(load_config(None, [*EXACT, *ema, f"experiment.output_dir={tmp_path / 'one'}"]))
    resumed = stop_then_resume(tmp_path / "two", monkeypatch, 2, *ema)
    a, b = load_checkpoint(one_go.checkpoint)["actor"], load_checkpoint(resumed.checkpoint)["actor"]
    for key in ("policy", "live_policy"):
        assert a[key].keys() == b[key].keys() and all(torch.equal(a[key][k], b[key][k]) for k in a[key])
    live = a["live_policy"]
    assert any(not torch.equal(a["policy"][k], live[k]) for k in live)  # policy/ is the average, not the live one

    # The periodic eval measured the average: `embodied eval` of the checkpoint (which reads its policy) agrees.
    cfg = load_config(None, [*EXACT, *ema, f"experiment.output_dir={tmp_path / 'one'}"])
    report = evaluate_checkpoint(cfg, one_go.checkpoint, 4, tmp_path / "eval")
    np.testing.assert_allclose(report.summary.return_mean, one_go.final_eval["eval/return"], rtol=1e-6)


@pytest.mark.ray
def test_on_ray_the_eval_gets_the_average_and_training_goes_on_with_the_live_weights(tmp_path, ray_session):
    ema = ["actor.ema_decay=0.5", "runner.iterations=3", "runner.eval_every=1", "runner.eval_episodes=4",
           "runner.checkpoint_every=1", "cluster.backend=ray", "cluster.num_env_workers=2"]
    cfg = load_config(None, [*EXACT, *ema, f"experiment.output_dir={tmp_path}"])
    result = runner.train(cfg)
    local = load_config(None, [*EXACT, *ema[:-2], "cluster.num_env_workers=2", f"experiment.output_dir={tmp_path}"])
    for it in (2, 3):  # each eval measured that iteration's average, which its checkpoint holds (read back locally)
        report = evaluate_checkpoint(local, result.run_dir / "checkpoints" / f"iter_{it:06d}", 4, tmp_path / f"e{it}")
        np.testing.assert_allclose(report.summary.return_mean, result.history[it - 1]["eval/return"], rtol=1e-6)
    saved = load_checkpoint(result.checkpoint)["actor"]
    assert any(not torch.equal(saved["policy"][k], v) for k, v in saved["live_policy"].items())


def test_a_run_without_an_average_resumes_its_live_weights_from_a_run_that_had_one(tmp_path):
    first = runner.train(load_config(None, [*EXACT, "runner.iterations=2", "actor.ema_decay=0.5",
                                            f"experiment.output_dir={tmp_path}"]))
    saved = load_checkpoint(first.checkpoint)["actor"]
    spec = PolicySpec(**load_checkpoint(first.checkpoint)["policy_spec"])
    actor = ActorWorker(load_config(None, EXACT).policy, spec, PPOConfig(), ActorConfig(), total_iterations=4,
                        seed=0)
    actor.load_state(saved)
    assert actor.ema is None
    state = actor.policy.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved["live_policy"].items())


@pytest.mark.parametrize("overrides, message", [
    (["actor.ema_decay=1.0"], "actor.ema_decay: must be in [0, 1)"),
    (["actor.ema_decay=-0.1"], "actor.ema_decay: must be in [0, 1)"),
    (["actor.ema_decay=0.99", "runner.mode=async"], "actor.ema_decay: evals load the average"),
    (["actor.ema_decay=0.99", "actor.strategy=fsdp", "actor.num_ranks=2", "cluster.backend=ray"],
     "actor.ema_decay: not with actor.strategy=fsdp"),
])
def test_bad_decays_are_refused_by_name(overrides, message):
    assert message in error_of(overrides)

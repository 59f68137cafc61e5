"""The on-policy learner's learning-rate schedule (``embodied.algorithms.schedule.learning_rate``): linear decay over
the run times a linear warm-up over the first policy iterations (after critic warm-up), per optimizer step, and
that the optimizer really takes it."""

from __future__ import annotations

import pytest

from embodied.algorithms.schedule import learning_rate
from embodied.algorithms.ppo_config import PPOConfig
from embodied.config import ActorConfig, ConfigError, load_config
from embodied.policies.cnn.configuration import CNNConfig
from embodied.workers.actor_worker import ActorWorker
from tests.embodied.workers.test_critic_warmup import rollout
from tests.policies import test_cnn


def actor(warmup: int, anneal: bool, critic_warmup: int = 0, epochs: int = 2, minibatches: int = 2,
          lr: float = 1e-3) -> ActorWorker:
    return ActorWorker(CNNConfig(action_chunk=test_cnn.C, **test_cnn.SMALL), test_cnn.WRIST,
                       PPOConfig(update_epochs=epochs, num_minibatches=minibatches,
                                 critic_warmup_iterations=critic_warmup, anneal_lr=anneal,
                                 lr_warmup_iterations=warmup, lr=lr),
                       ActorConfig(), total_iterations=10, seed=0)


def test_the_schedule_is_decay_times_warmup_per_optimizer_step():
    a = actor(warmup=2, anneal=True, critic_warmup=1)
    for iteration in range(1, 11):
        for step in range(4):  # 2 epochs x 2 minibatches
            decay = 1.0 - (iteration - 1) / 10
            done = iteration - 1 - 1 + (step + 1) / 4  # policy iterations done at the end of this step
            warm = 1.0 if iteration == 1 else min(1.0, done / 2)  # the value head alone trains at full rate first
            lr = learning_rate(a.algo, a.algo.lr, a.total_iterations, iteration, step)
            assert lr == pytest.approx(1e-3 * decay * warm, rel=1e-12)
    plain = actor(warmup=0, anneal=False)
    assert {learning_rate(plain.algo, plain.algo.lr, plain.total_iterations, i, s)
            for i in range(1, 11) for s in range(4)} == {1e-3}


def test_the_first_adam_step_moves_the_weights_by_the_warmed_up_rate():
    """Adam's first step moves each weight by about lr whatever its gradient: with a warm-up of 4
    iterations of one step each, the first step's largest move is a quarter of the plain one."""
    moves = {}
    for warmup in (0, 4):
        a = actor(warmup=warmup, anneal=False, epochs=1, minibatches=1, lr=1e-2)
        before = {k: v.clone() for k, v in a.policy.state_dict().items()}
        metrics = a.update([rollout(a.policy, test_cnn.obs(4))], iteration=1)
        after = a.policy.state_dict()
        moves[warmup] = max(float((after[k] - before[k]).abs().max()) for k in before if before[k].is_floating_point())
        assert metrics["train/lr"] == pytest.approx(1e-2 if warmup == 0 else 1e-2 / 4)
    assert moves[4] == pytest.approx(moves[0] / 4, rel=0.05)


def test_a_negative_warmup_is_refused_by_name():
    with pytest.raises(ConfigError, match="algorithm.lr_warmup_iterations: must be >= 0"):
        load_config(None, ["algorithm.lr_warmup_iterations=-1"])

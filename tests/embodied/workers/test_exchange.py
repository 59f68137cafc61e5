"""Env and rollout workers trade the right rows on both backends, for any E, R and uneven N."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodied.backends import LocalBackend, RayBackend
from embodied.config import load_config
from embodied.core.registry import POLICIES
from embodied.workers.group import Workers
from embodied.workers.launch import EVAL_SEED_OFFSET

POLICIES.register("echo", "tests.toy_policies:EchoConfig")
SEED = 100


def start(backend, num_envs: int, env_ranks: int, rollout_ranks: int, max_steps: int = 5, stages: int = 1) -> Workers:
    cfg = load_config(None, [f"rollout.pipeline_stages={stages}",
        "env.id=tests.toy_envs:CountingEnv", f"env.num_envs={num_envs}", f"env.max_episode_steps={max_steps}",
        f"cluster.num_env_workers={env_ranks}", f"cluster.num_rollout_workers={rollout_ranks}",
        "policy.type=echo", "policy.action_chunk=2", f"experiment.seed={SEED}", "algorithm.num_minibatches=1",
    ])
    return Workers.start(cfg, backend)


def make_backend(request, name: str):
    if name == "ray":
        request.getfixturevalue("ray_session")
        from embodied.config import ClusterConfig

        made = RayBackend(ClusterConfig(backend="ray"))
    else:
        made = LocalBackend()
    request.addfinalizer(made.shutdown)
    return made


@pytest.fixture
def local_backend(request):
    return make_backend(request, "local")


@pytest.mark.parametrize("num_envs, env_ranks, rollout_ranks", [(7, 2, 3), (5, 1, 2), (6, 3, 1)])
def test_each_env_gets_its_own_actions_back(local_backend, num_envs, env_ranks, rollout_ranks):
    """On Ray: ``test_two_pipeline_stages...[ray]`` gets the local trajectories, so the same rows, back."""
    workers = start(local_backend, num_envs, env_ranks, rollout_ranks)
    workers.sync_weights()
    trajectories = workers.take_trajectories(workers.rollout(chunk_steps=4))
    rewards = np.concatenate([t.rewards.numpy() for t in trajectories], axis=1)  # [T, N, C]
    assert rewards.shape == (4, num_envs, 2)
    # The echo policy's action is the env's own reset seed (SEED + global index), and the reward
    # is that action: any mis-routed row in either direction shows up here.
    expected = SEED + np.arange(num_envs, dtype=np.float32)
    executed = np.concatenate([t.executed.numpy() for t in trajectories], axis=1)
    np.testing.assert_array_equal(rewards, np.where(executed, expected[None, :, None], 0))
    # 8 sub-steps with episodes of 5: everyone truncates once, in the third chunk (sub-step 5).
    dones = np.concatenate([t.dones.numpy() for t in trajectories], axis=1)
    assert dones[2].all() and dones.sum() == num_envs
    assert all(t.version == 0 for t in trajectories)
    workers.close()


def test_epochs_continue_where_the_last_one_stopped(local_backend):
    workers = start(local_backend, num_envs=3, env_ranks=1, rollout_ranks=2, max_steps=100)
    workers.sync_weights()
    first = workers.take_trajectories(workers.rollout(chunk_steps=2))
    second = workers.take_trajectories(workers.rollout(chunk_steps=2))
    steps = np.concatenate([t.forward_inputs["states"][:, :, 0].numpy() for t in first], axis=1)
    assert steps[:, 0].tolist() == [0, 2]
    again = np.concatenate([t.forward_inputs["states"][:, :, 0].numpy() for t in second], axis=1)
    assert again[:, 0].tolist() == [4, 6]
    workers.close()


def test_eval_uses_fixed_seeds_apart_from_training(local_backend):
    workers = start(local_backend, num_envs=4, env_ranks=2, rollout_ranks=1)
    workers.sync_weights()
    check_eval_seeds(workers)
    workers.close()


def check_eval_seeds(workers: Workers) -> None:
    """Six eval episodes on 4 eval envs; ``workers`` have synced weights."""
    episodes = workers.evaluate(episodes=6)  # two rounds of 4 eval envs, the last two fillers dropped
    assert len(episodes) == 6
    # Reward per sub-step = the env's first reset seed, from the eval range, same for both rounds.
    returns = sorted(e.episode_return / e.length for e in episodes)
    base = SEED + EVAL_SEED_OFFSET
    assert returns == sorted([base + i for i in range(4)] + [base, base + 1])
    assert sorted(e.episode_return for e in workers.evaluate(episodes=6)) == sorted(e.episode_return for e in episodes)


def test_weight_versions_reach_the_rollout_workers(local_backend):
    workers = start(local_backend, num_envs=2, env_ranks=1, rollout_ranks=2)
    check_weight_versions(workers)
    workers.close()


@pytest.mark.ray
def test_on_ray_weight_versions_reach_the_rollout_workers_and_eval_uses_fixed_seeds(request):
    """The two checks above on one set of Ray workers (their start is most of the time here)."""
    workers = start(make_backend(request, "ray"), num_envs=4, env_ranks=2, rollout_ranks=2)
    check_weight_versions(workers)
    check_eval_seeds(workers)  # the echo policy's actions are the envs' seeds whatever its weights
    workers.close()


def check_weight_versions(workers: Workers) -> None:
    """Version 0, an update, version 1 in every rollout worker's trajectories."""
    assert workers.sync_weights() == 0
    trajectories = workers.rollout(chunk_steps=1)
    metrics = workers.update(trajectories, iteration=1)
    assert np.isfinite(metrics["train/value_loss"])
    assert workers.sync_weights() == 1
    assert {t.version for t in workers.rollout(chunk_steps=1)} == {1}


@pytest.mark.parametrize("backend_name, num_envs, env_ranks, rollout_ranks", [
    ("local", 7, 2, 3), ("local", 5, 1, 2), ("local", 9, 3, 2), pytest.param("ray", 7, 2, 3, marks=pytest.mark.ray),
])
def test_two_pipeline_stages_give_the_same_trajectories_as_one(request, backend_name, num_envs, env_ranks,
                                                              rollout_ranks):
    """On Ray, the two stages are compared with one stage on the local backend: the same rows, and so also the
    check that each env gets its own actions back there."""
    def run(stages: int):
        name = "local" if stages == 1 else backend_name
        workers = start(make_backend(request, name), num_envs, env_ranks, rollout_ranks, stages=stages)
        workers.sync_weights()
        trajectories = [*workers.take_trajectories(workers.rollout(chunk_steps=4)),
                        *workers.take_trajectories(workers.rollout(chunk_steps=3))]
        workers.close()
        return trajectories

    for one, two in zip(run(1), run(2)):
        for name in ("rewards", "executed", "dones", "terminated", "actions", "next_values"):
            assert torch.equal(getattr(one, name), getattr(two, name)), name
        assert torch.equal(one.forward_inputs["states"], two.forward_inputs["states"])
        assert [(e.env_index, e.length) for e in one.episodes] == [(e.env_index, e.length) for e in two.episodes]


def test_pipeline_stages_must_each_get_an_env():
    from embodied.config import ConfigError

    with pytest.raises(ConfigError, match="rollout.pipeline_stages: 2 stages x cluster.num_env_workers=3"):
        load_config(None, ["env.num_envs=5", "cluster.num_env_workers=3", "rollout.pipeline_stages=2"])

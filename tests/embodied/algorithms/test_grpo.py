"""GRPO: group advantages and the asymmetric clipped loss against plain loops; the episode mean against a
plain loop; groups share a start state; a short GRPO run trains; critic warm-up moves only the value head."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from embodied.algorithms.base import LearnerSpec
from embodied.policy.config import PolicySpec
from embodied.algorithms import episode_mean_weights, group_advantages, grpo_loss

ANY_SPEC = LearnerSpec(PolicySpec(3, None, 2, (-1.0,) * 2, (1.0,) * 2), 1, 0, 1e-3, 1)  # what prepare() never reads


def test_group_advantages_match_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(12, generator=g, dtype=torch.float64)
    scores[4:8] = 3.0  # one group with no spread
    adv, kept = group_advantages(scores, 4)
    for k in range(3):
        group = scores[4 * k:4 * k + 4].tolist()
        mean = sum(group) / 4
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / 4)
        for j, x in enumerate(group):
            expected = 0.0 if max(group) == min(group) else (x - mean) / (std + 1e-6)
            assert adv[4 * k + j].item() == pytest.approx(expected, abs=1e-9)
            assert bool(kept[4 * k + j]) == (max(group) != min(group))
    with pytest.raises(ValueError, match="groups of 5"):
        group_advantages(scores, 5)


def test_grpo_loss_matches_a_plain_loop_with_an_asymmetric_clip():
    g = torch.Generator().manual_seed(1)
    new, old = torch.randn(5, 2, 3, generator=g), torch.randn(5, 2, 3, generator=g)
    adv = torch.randn(5, generator=g)
    mask = torch.rand(5, 2, 3, generator=g) > 0.3
    out = grpo_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28)
    total, count = 0.0, 0
    for b in range(5):
        for c in range(2):
            for a in range(3):
                if not mask[b, c, a]:
                    continue
                ratio = math.exp(new[b, c, a] - old[b, c, a])
                clipped = min(max(ratio, 0.8), 1.28)
                total += min(ratio * adv[b].item(), clipped * adv[b].item())
                count += 1
    assert out["loss"].item() == pytest.approx(-total / count, rel=1e-5)


def test_the_episode_mean_weighs_every_episode_alike_and_a_group_sums_to_zero():
    """Successes that end early: under the token mean the group's advantages sum to < 0 over the loss;
    the episode weights make the loss a plain mean over episodes of each episode's sub-step mean."""
    g = torch.Generator().manual_seed(2)
    steps, envs, chunk = 6, 8, 3
    lengths = [2, 6, 6, 6, 3, 6, 6, 5]  # chunk steps each env executed (a success ends early)
    executed = torch.zeros(steps, envs, chunk, dtype=torch.bool)
    for n, length in enumerate(lengths):
        executed[:length, n] = True
    executed[4, 7, 2] = False  # the last env's episode ends inside a chunk
    scores = torch.tensor([1.0, 0, 0, 0, 1, 0, 1, 0], dtype=torch.float64)  # success scores, two groups of 4
    adv, kept = group_advantages(scores, 4)
    counts = executed.sum(dim=(0, 2)).double()
    assert float((adv * counts).sum()) < -1.0  # token mean: the failures outweigh the early successes
    weights = episode_mean_weights(executed, kept)
    weighted = adv * weights
    for k in range(2):
        assert float((weighted * counts)[4 * k:4 * k + 4].sum()) == pytest.approx(0.0, abs=1e-9)

    new, old = torch.randn(steps, envs, chunk, generator=g), torch.randn(steps, envs, chunk, generator=g)
    flat = lambda x: x.reshape(steps * envs, chunk)  # noqa: E731 - the [T * N, C] layout of a batch
    out = grpo_loss(flat(new), flat(old), weighted.float().expand(steps, envs).reshape(-1), flat(executed), 0.2, 0.28)
    per_episode = []
    for n in range(envs):
        terms = []
        for t in range(steps):
            for c in range(chunk):
                if executed[t, n, c]:
                    ratio = math.exp(new[t, n, c] - old[t, n, c])
                    a = adv[n].item()
                    terms.append(min(ratio * a, min(max(ratio, 0.8), 1.28) * a))
        per_episode.append(sum(terms) / len(terms))
    assert out["loss"].item() == pytest.approx(-sum(per_episode) / envs, rel=1e-5)


@pytest.mark.parametrize("mean", ["token", "episode"])
def test_grpo_prepare_weighs_episodes_as_configured(mean):
    from embodied.algorithms.grpo import GRPO
    from embodied.algorithms.grpo_config import GRPOConfig
    from embodied.core.types import Trajectory

    steps, envs, chunk = 5, 4, 2
    executed = torch.zeros(steps, envs, chunk, dtype=torch.bool)
    for n, length in enumerate([2, 5, 5, 4]):
        executed[:length, n] = True
    rewards = torch.zeros(steps, envs, chunk)
    rewards[0, 0, 0] = 1.0  # env 0 scores best and ends first
    z = torch.zeros(steps, envs)
    traj = Trajectory(forward_inputs={"x": torch.zeros(steps, envs, 1)}, actions=torch.zeros(steps, envs, chunk, 2),
                      logprobs=torch.zeros(steps, envs, chunk), values=z, rewards=rewards, executed=executed,
                      dones=z.bool(), terminated=z.bool(), final_values=z, next_values=torch.zeros(envs), version=0)
    batch, _ = GRPO(GRPOConfig(group_size=4, grpo_loss_mean=mean), ANY_SPEC).prepare([traj])
    total = float((batch["advantages"].double() * batch["executed"].sum(1)).sum())  # the loss's weight on the group
    if mean == "episode":
        assert total == pytest.approx(0.0, abs=1e-6)
    else:
        assert total < -1.0


def test_dropped_groups_get_no_episode_weight():
    executed = torch.ones(4, 4, 2, dtype=torch.bool)
    executed[2:, 1] = False
    kept = torch.tensor([False, False, True, True])
    assert episode_mean_weights(executed, kept).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert episode_mean_weights(executed, torch.zeros(4, dtype=torch.bool)).tolist() == [0.0] * 4


def test_a_group_of_envs_starts_from_one_state_and_groups_differ():
    from embodied.config import load_config
    from embodied.backends import LocalBackend
    from embodied.workers.group import Workers

    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=8", "cluster.num_env_workers=2",
                             "algorithm.name=grpo", "algorithm.group_size=4", "env.auto_reset=false",
                             "env.max_episode_steps=16", "rollout.chunk_steps=4", "policy.action_chunk=4",
                             "eval_env.num_envs=2"])
    backend = LocalBackend()
    try:
        workers = Workers.start(cfg, backend)
        for worker in workers.env_group.workers:
            worker._reset(123, group_size=4)
        states = np.concatenate([w.stages[0].obs["states"] for w in workers.env_group.workers])
        workers.close()
    finally:
        backend.shutdown()
    assert (states[:4] == states[0]).all() and (states[4:] == states[4]).all()  # envs 4-7 span no worker split
    assert not np.array_equal(states[0], states[4])


@pytest.mark.slow
@pytest.mark.parametrize("mean", ["token", "episode"])
def test_a_short_grpo_run_trains_on_whole_episodes(tmp_path, mean):
    from embodied.config import load_config
    from embodied.runs.train import train

    cfg = load_config(None, ["env.id=Reach-v0", "env.num_envs=8", "env.auto_reset=false", "env.max_episode_steps=12",
                             "algorithm.name=grpo", "algorithm.group_size=4", "algorithm.num_minibatches=2",
                             f"algorithm.grpo_loss_mean={mean}", "rollout.chunk_steps=3", "policy.action_chunk=4", "policy.hidden_sizes=[16]",
                             "runner.iterations=3", "runner.eval_every=0", "runner.eval_episodes=2", "eval_env.num_envs=2",
                             "logger.backends=[]", "logger.progress_bar=false", "runner.plot=false",
                             f"experiment.output_dir={tmp_path}"])
    result = train(cfg)
    for metrics in result.history:
        assert metrics["grpo/groups"] == 2.0 and 0 <= metrics["grpo/dropped_groups"] <= 2
        assert metrics["env/episodes"] == 8  # one whole episode per env
        assert math.isfinite(metrics["train/policy_loss"]) and "train/value_loss" not in metrics


def test_critic_warmup_moves_the_value_head_alone(tmp_path):
    import embodied.runs.train as runner
    from embodied.checkpoint.store import load_checkpoint
    from tests.embodied.runs.test_resume import toy_config

    first = runner.train(toy_config(tmp_path, "runner.iterations=1"))
    start = load_checkpoint(first.checkpoint)["actor"]["policy"]
    warm = runner.train(toy_config(tmp_path, "runner.iterations=3", "algorithm.critic_warmup_iterations=2",
                                   f"policy.init_from={first.checkpoint}"))
    assert [m["train/critic_warmup"] for m in warm.history] == [1.0, 1.0, 0.0]
    ckpt = sorted((warm.run_dir / "checkpoints").iterdir())
    after_warmup = load_checkpoint(ckpt[1])["actor"]["policy"]  # iteration 2
    assert torch.equal(after_warmup["log_std"], start["log_std"])
    assert all(torch.equal(after_warmup[k], start[k]) for k in start if k.startswith("actor_mean."))
    assert not all(torch.equal(after_warmup[k], start[k]) for k in start if k.startswith("critic."))
    final = load_checkpoint(ckpt[2])["actor"]["policy"]
    assert not torch.equal(final["actor_mean.0.weight"], start["actor_mean.0.weight"])  # then the policy moves

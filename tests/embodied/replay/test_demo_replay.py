"""RLPD's demo replay: batch splitting and joining against plain loops, demonstrations as chunk transitions
(recorded rewards, a sparse success reward where none are recorded), and bad input named before any worker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.algorithms.sac import ReplaySample, chunk_reward
from embodied.config import ConfigError, load_config
from embodied.data import DemoDataset, DemoEpisode, DemoSample, Meta
from embodied.data.format import write_dataset
from embodied.env_runtime.factory import env_spec
from embodied.policy.base import PolicySpec
from embodied.replay.buffer import ReplayBuffer
from embodied.replay.demos import (concat_samples, demo_replay, fit_demos, mixed_sample, next_rows, open_demos,
                                   sparse_success_rewards, split_batch)
from embodied.workers.actor_worker import ActorWorker

RECIPE = Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_sac.yaml"
C, A, S = 2, 2, 3
SPEC = PolicySpec(state_dim=S, image_shape=None, action_dim=A, action_low=(-1.0,) * A, action_high=(1.0,) * A)


# -- the pure parts, against plain loops --------------------------------------------------------------


def test_split_batch_matches_a_plain_count():
    for batch_size in (1, 2, 7, 256):
        for ratio in (0.0, 0.1, 0.25, 0.5, 0.75, 1.0):
            demo, online = split_batch(batch_size, ratio)
            nearest = 0  # the row count nearest batch_size * ratio, the larger of two as near
            for n in range(batch_size + 1):
                if abs(n - batch_size * ratio) <= abs(nearest - batch_size * ratio):
                    nearest = n
            assert (demo, online) == (nearest, batch_size - nearest)


def sample(n: int, offset: float) -> ReplaySample:
    g = torch.Generator().manual_seed(int(offset))
    return ReplaySample(obs={"states": torch.randn(n, S, generator=g) + offset}, actions=torch.randn(n, C, A),
                        reward=torch.randn(n), discount=torch.rand(n), bootstrap=torch.rand(n) > 0.5,
                        next_obs={"states": torch.randn(n, S, generator=g)})


def test_concat_samples_matches_a_plain_loop():
    a, b = sample(3, 0.0), sample(2, 10.0)
    joined = concat_samples(a, b)
    for i in range(5):
        src, j = (a, i) if i < 3 else (b, i - 3)
        assert torch.equal(joined.obs["states"][i], src.obs["states"][j])
        assert torch.equal(joined.next_obs["states"][i], src.next_obs["states"][j])
        assert torch.equal(joined.actions[i], src.actions[j]) and joined.reward[i] == src.reward[j]
        assert joined.discount[i] == src.discount[j] and joined.bootstrap[i] == src.bootstrap[j]
    with pytest.raises(ValueError, match="main_images"):
        concat_samples(a, ReplaySample({"main_images": torch.zeros(1)}, b.actions, b.reward, b.discount, b.bootstrap,
                                       {"main_images": torch.zeros(1)}))


def test_next_rows_matches_a_plain_search():
    episodes = np.array([0, 0, 0, 1, 1, 5, 5, 5, 5])
    steps = np.array([0, 1, 2, 0, 1, 0, 1, 2, 3])
    advance = np.array([1, 1, 1, 1, 1, 2, 2, 1, 1])
    expected = []
    for e, s, a in zip(episodes, steps, advance):
        found = [j for j in range(len(steps)) if episodes[j] == e and steps[j] == s + a]
        expected.append(found[0] if found else -1)
    assert next_rows(episodes, steps, advance).tolist() == expected == [1, 2, -1, 4, -1, 7, 8, 8, -1]


def test_sparse_success_rewards_match_a_plain_loop():
    executed = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=bool)
    ends = np.array([False, True, True, True])
    rewards = sparse_success_rewards(executed, ends)
    expected = np.zeros((4, 3), dtype=np.float32)
    for i in range(4):
        steps = [k for k in range(3) if executed[i, k]]
        if ends[i] and steps:
            expected[i, steps[-1]] = 1.0
    np.testing.assert_array_equal(rewards, expected)


# -- demonstrations as replay -----------------------------------------------------------------------


def episode(seed: int, length: int, success: bool) -> DemoEpisode:
    rng = np.random.default_rng(seed)
    executed = np.ones((length, C), dtype=bool)
    executed[-1, 1:] = False  # the episode ends on the last chunk's first sub-step
    rewards = rng.random((length, C)).astype(np.float32) * executed
    return DemoEpisode(seed=seed, task="reach", success=success,
                       obs={"states": rng.standard_normal((length, S)).astype(np.float32)},
                       actions=rng.uniform(-1, 1, (length, C, A)).astype(np.float32) * executed[..., None],
                       executed=executed, rewards=rewards)


def write(out: Path, episodes: list[DemoEpisode], action_dim: int = A, state_dim: int = S,
          env_id: str = "Reach-v0") -> Path:
    if action_dim != A or state_dim != S:
        for ep in episodes:
            ep.actions = np.zeros((ep.length, C, action_dim), dtype=np.float32)
            ep.obs = {"states": np.zeros((ep.length, state_dim), dtype=np.float32)}
    meta = Meta(env_id=env_id, obs_mode="state", max_episode_steps=50, action_chunk=C, action_dim=action_dim,
                action_low=[-1.0] * action_dim, action_high=[1.0] * action_dim, state_dim=state_dim, image_shapes={},
                episodes=len(episodes), successes=sum(e.success for e in episodes),
                episodes_attempted=len(episodes), successes_attempted=sum(e.success for e in episodes),
                rows=sum(e.length for e in episodes), expert="test", seed=0, tasks=["reach"])
    return write_dataset(out, episodes, meta)


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """A successful episode of 3 chunk steps and a failed one of 2."""
    return write(tmp_path_factory.mktemp("demos") / "d", [episode(0, 3, True), episode(1, 2, False)])


def test_demo_replay_holds_the_chunk_transitions_sac_computes(demos):
    data = DemoDataset(demos)
    replay = demo_replay(data, ["states"], gamma=0.9)
    ep0, ep1 = episode(0, 3, True), episode(1, 2, False)
    # ep0: rows 0->1, 1->2, 2 terminal; ep1: row 0->1, its last row (a failure: no next obs) is left out
    assert len(replay) == 4
    st = replay.storage
    states = [ep0.obs["states"][0], ep0.obs["states"][1], ep0.obs["states"][2], ep1.obs["states"][0]]
    following = [ep0.obs["states"][1], ep0.obs["states"][2], None, ep1.obs["states"][1]]
    rewards = [ep0.rewards[0], ep0.rewards[1], ep0.rewards[2], ep1.rewards[0]]
    executed = [ep0.executed[0], ep0.executed[1], ep0.executed[2], ep1.executed[0]]
    for i in range(4):
        np.testing.assert_array_equal(st["obs/states"][i].numpy(), states[i])
        if following[i] is not None:
            np.testing.assert_array_equal(st["next_obs/states"][i].numpy(), following[i])
        reward, discount = chunk_reward(torch.tensor(rewards[i])[None], torch.tensor(executed[i])[None], 0.9)
        assert torch.allclose(st["reward"][i], reward[0]) and torch.allclose(st["discount"][i], discount[0])
        assert bool(st["bootstrap"][i]) == (i != 2)  # the success ends ep0: a termination
    np.testing.assert_array_equal(st["actions"][3].numpy(), ep1.actions[0])


def test_under_bootstrap_terminations_a_successful_last_chunk_bootstraps_from_its_own_obs(demos):
    plain = demo_replay(DemoDataset(demos), ["states"], gamma=0.9)
    always = demo_replay(DemoDataset(demos), ["states"], gamma=0.9, bootstrap_terminations=True)
    assert not plain.storage["bootstrap"][2] and bool(always.storage["bootstrap"].all())
    np.testing.assert_array_equal(always.storage["next_obs/states"][2].numpy(), episode(0, 3, True).obs["states"][2])
    assert len(always) == len(plain) == 4  # the failed episode's last chunk is still left out (no next obs)
    for key in set(plain.storage) - {"bootstrap"}:
        assert torch.equal(plain.storage[key], always.storage[key]), key


def test_demo_replay_in_n_steps_follows_each_episode_and_stops_before_a_dropped_chunk(demos):
    replay = demo_replay(DemoDataset(demos), ["states"], gamma=0.9, n_step=3)
    ep0, ep1 = episode(0, 3, True), episode(1, 2, False)
    one = [chunk_reward(torch.tensor(e.rewards[t])[None], torch.tensor(e.executed[t])[None], 0.9)
           for e, t in ((ep0, 0), (ep0, 1), (ep0, 2), (ep1, 0))]
    st = replay.storage
    # ep0 row 0: chunks 0, 1, 2; the last terminates (a success), so no bootstrap
    (r0, d0), (r1, d1), (r2, d2), (r3, d3) = [(float(r), float(d)) for r, d in one]
    assert float(st["reward"][0]) == pytest.approx(r0 + d0 * r1 + d0 * d1 * r2)
    assert float(st["discount"][0]) == pytest.approx(d0 * d1 * d2) and not st["bootstrap"][0]
    assert float(st["reward"][1]) == pytest.approx(r1 + d1 * r2) and not st["bootstrap"][1]
    # ep1 row 0: its next chunk (the failure's last) is left out, so the window is one chunk and bootstraps
    assert float(st["reward"][3]) == pytest.approx(r3) and float(st["discount"][3]) == pytest.approx(d3)
    assert st["bootstrap"][3]
    np.testing.assert_array_equal(st["next_obs/states"][3].numpy(), ep1.obs["states"][1])


class FrameDemos:
    """A per-frame source with no rewards recorded (as a LeRobot folder): chunks of C=2 frames."""

    path, fps, chunk_rows, rewards, episode_success = Path("frames"), 10.0, False, None, None

    def __init__(self, length: int) -> None:
        self.length = length
        self.states = np.arange(length * S, dtype=np.float32).reshape(length, S)

    @property
    def episode_indices(self) -> np.ndarray:
        return np.zeros(self.length, dtype=np.int64)

    @property
    def steps(self) -> np.ndarray:
        return np.arange(self.length)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> DemoSample:
        executed = torch.tensor([i + k < self.length for k in range(C)])
        return DemoSample({"states": self.states[i], "task_descriptions": "x"}, torch.ones(C, A) * executed[:, None],
                          executed)


def test_frames_without_rewards_get_a_sparse_success_reward_at_the_episode_end():
    replay = demo_replay(FrameDemos(5), ["states"], gamma=0.5)  # frames 0..4; chunks of 2 frames
    st = replay.storage
    assert len(replay) == 5
    # frame i's chunk runs frames i, i+1: the next chunk starts at frame i + 2; frames 3 and 4 end the episode
    for i, nxt in ((0, 2), (1, 3), (2, 4)):
        np.testing.assert_array_equal(st["next_obs/states"][i].numpy(), np.arange(nxt * S, nxt * S + S))
    assert st["bootstrap"].tolist() == [True, True, True, False, False]
    # frame 3's chunk ends on its second sub-step (reward 1 discounted once), frame 4's on its first
    assert torch.allclose(st["reward"], torch.tensor([0.0, 0.0, 0.0, 0.5, 1.0]))
    assert torch.allclose(st["discount"], torch.tensor([0.25, 0.25, 0.25, 0.25, 0.5]))


def test_mixed_sample_draws_the_demo_ratio_from_demonstrations():
    demos, online = ReplayBuffer(10), ReplayBuffer(10)
    for buffer, offset in ((demos, 100.0), (online, -100.0)):
        s = sample(10, offset)
        buffer.add_transitions(s.obs, s.actions, s.reward, s.discount, s.bootstrap, s.next_obs)
    g = torch.Generator().manual_seed(0)
    for ratio, want in ((0.5, 4), (0.25, 2), (0.0, 0), (1.0, 8)):
        batch, n = mixed_sample(demos, online, 8, ratio, g)
        assert n == want and len(batch.actions) == 8
        assert (batch.obs["states"].mean(-1) > 50).sum() == want  # the demo rows, first
        assert (batch.obs["states"][:want].mean(-1) > 50).all()


def test_the_actor_samples_demo_ratio_of_every_batch(demos):
    cfg = load_config(RECIPE, ["policy.hidden_sizes=[8]", "algorithm.critic_hidden_sizes=[8]", "algorithm.batch_size=4",
                               "algorithm.learning_starts=1", f"policy.action_chunk={C}", f"algorithm.demos={demos}"])
    actor = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor, 1, 0)
    assert actor.training.demos is not None and len(actor.training.demos) == 4
    from tests.embodied.runs.test_offpolicy import transitions

    metrics = actor.update([transitions(T=2, N=2)], 0)
    assert metrics["offpolicy/updates"] == 4 and metrics["replay/demo_share"] == 0.5
    assert all(np.isfinite(v) for v in metrics.values())


def test_bc_weight_pulls_the_greedy_chunk_to_the_demonstrations_and_is_logged(demos):
    """TD3+BC's term on the demonstration rows: with it the actor's greedy chunk moves toward the demonstrated
    ones faster than the critics alone move it; without demonstration rows in the batch it is 0."""
    from tests.embodied.runs.test_offpolicy import transitions

    def run(weight: float) -> tuple[float, float, dict[str, float]]:
        cfg = load_config(RECIPE, ["policy.hidden_sizes=[8]", "algorithm.critic_hidden_sizes=[8]",
                                   "algorithm.batch_size=4", "algorithm.learning_starts=1", "algorithm.utd_ratio=10",
                                   "algorithm.lr=0.01", f"policy.action_chunk={C}", f"algorithm.demos={demos}",
                                   f"algorithm.bc_weight={weight}"])
        actor = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor, 1, 0)
        d = actor.training.demos.sample(len(actor.training.demos), torch.Generator().manual_seed(0))
        error = lambda: float(actor.policy.mode_error(d.obs["states"], d.actions).mean())  # noqa: E731
        before = error()
        metrics = actor.update([transitions(T=2, N=2)], 1)  # iteration 1: the actor trains (no critic warm-up)
        return before, error(), metrics

    before, plain, m0 = run(0.0)
    same_start, cloned, m1 = run(10.0)
    assert same_start == before and m0["sac/bc_loss"] == 0.0 and m1["sac/bc_loss"] > 0
    assert cloned < 0.8 * before and cloned < plain - 0.1


def test_awr_actor_regresses_onto_replay_chunks(demos):
    """algorithm.name: awac: the actor regresses its greedy chunk onto the batch's chunks, weighted by
    their advantage; with every row a demonstration, it moves toward the demonstrated chunks."""
    from tests.embodied.runs.test_offpolicy import transitions

    cfg = load_config(RECIPE, ["policy.hidden_sizes=[8]", "algorithm.critic_hidden_sizes=[8]", "algorithm.batch_size=4",
                               "algorithm.learning_starts=1", "algorithm.utd_ratio=10", "algorithm.lr=0.01",
                               f"policy.action_chunk={C}", f"algorithm.demos={demos}", "algorithm.demo_ratio=1.0",
                               "algorithm.name=awac", "algorithm.awr_temperature=1.0"])
    actor = ActorWorker(cfg.algorithm.worker_policy(cfg.policy), SPEC, cfg.algorithm, cfg.actor, 1, 0)
    d = actor.training.demos.sample(len(actor.training.demos), torch.Generator().manual_seed(0))
    error = lambda: float(actor.policy.mode_error(d.obs["states"], d.actions).mean())  # noqa: E731
    before = error()
    metrics = actor.update([transitions(T=2, N=2)], 1)
    assert error() < 0.8 * before  # every batch row is a demonstration: the actor clones them, weighted
    assert np.isfinite(metrics["awac/policy_loss"]) and metrics["awac/policy_loss"] >= 0


# -- bad input, named before any worker starts ---------------------------------------------------------


@pytest.mark.parametrize("overrides, field", [
    (["algorithm.demo_ratio=1.5"], r"algorithm\.demo_ratio: .*\[0, 1\], got 1\.5"),
    (["algorithm.demo_ratio=-0.1"], r"algorithm\.demo_ratio"),
    (["algorithm.bc_weight=-1"], r"algorithm\.bc_weight: .*>= 0"),
    (["algorithm.name=awac", "algorithm.awr_temperature=0"], r"algorithm\.awr_temperature: .*> 0"),
    (["algorithm.name=awac", "algorithm.awr_max_weight=0"], r"algorithm\.awr_max_weight: .*> 0"),
    (["algorithm.bc_weight=1"], r"algorithm\.bc_weight: .*demonstration rows.*algorithm\.demos=None"),
    (["algorithm.bc_weight=1", "algorithm.demos=data/x", "algorithm.demo_ratio=0"],
     r"algorithm\.bc_weight: .*algorithm\.demo_ratio=0"),
])
def test_bad_rlpd_config_names_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        load_config(RECIPE, overrides)


def test_demos_with_another_algorithm_are_refused():
    with pytest.raises(ConfigError, match=r"algorithm\.demos: not a field of algorithm 'ppo' \(PPOConfig\)"):
        load_config(None, ["algorithm.name=ppo", "algorithm.demos=data/pick_place"])


def test_a_missing_demos_folder_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm\.demos: dataset .*nowhere.* does not exist"):
        open_demos(str(tmp_path / "nowhere"), C)


def test_demos_of_nothing_but_one_chunk_failures_are_refused(tmp_path):
    data = DemoDataset(write(tmp_path / "f", [episode(0, 1, False), episode(1, 1, False)]))
    with pytest.raises(ConfigError, match=r"algorithm\.demos: .*holds no chunk transition"):
        demo_replay(data, ["states"], gamma=0.9)


def test_a_demo_ratio_of_zero_or_one_is_fine():
    for ratio in (0.0, 1.0):
        assert load_config(RECIPE, [f"algorithm.demo_ratio={ratio}"]).algorithm.demo_ratio == ratio


def test_demos_that_do_not_fit_the_env_name_both_sides(tmp_path):
    wrong_action = write(tmp_path / "a", [episode(0, 2, True)], action_dim=5)
    with pytest.raises(ConfigError, match=r"algorithm\.demos: .*5 dimensions, the policy's \(the env's\) 2"):
        fit_demos(open_demos(str(wrong_action), C), SPEC, C)
    wrong_state = write(tmp_path / "s", [episode(0, 2, True)], state_dim=7)
    with pytest.raises(ConfigError, match=r"algorithm\.demos: .*its states are \(7,\), the env's \(3,\)"):
        fit_demos(open_demos(str(wrong_state), C), SPEC, C)
    rgb = PolicySpec(S, (8, 8, 3), A, (-1.0,) * A, (1.0,) * A)
    with pytest.raises(ConfigError, match=r"algorithm\.demos: .*it holds states .*needs main_images, states "
                                          r"\(missing: main_images\)"):
        fit_demos(open_demos(str(write(tmp_path / "k", [episode(0, 2, True)])), C), rgb, C)


def test_demos_are_checked_against_the_env_before_any_worker_starts(monkeypatch, tmp_path):
    from embodied.runs import train as runner

    def no_workers(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(runner.Workers, "start", no_workers)
    base = ["env.preflight=false", f"experiment.output_dir={tmp_path / 'runs'}", f"policy.action_chunk={C}"]
    action_dim = env_spec(load_config(RECIPE, base).env).action_dim
    wrong = write(tmp_path / "w", [episode(0, 2, True)], action_dim=action_dim + 1)
    cfg = load_config(RECIPE, [*base, f"algorithm.demos={wrong}"])
    with pytest.raises(ConfigError, match=rf"algorithm\.demos: .*{action_dim + 1} dimensions, the policy's "
                                          rf"\(the env's\) {action_dim}"):
        runner.train(cfg)
    missing = load_config(RECIPE, [*base, f"algorithm.demos={tmp_path / 'nowhere'}"])
    with pytest.raises(ConfigError, match=r"algorithm\.demos: .*does not exist"):
        runner.train(missing)
    assert not (tmp_path / "runs").exists()  # no run dir either


def test_a_lerobot_folder_gives_its_per_frame_rewards_and_successes_as_chunks(tmp_path):
    import pyarrow.parquet as pq

    from embodied.runs.collect import collect
    from embodied.data import ReadOptions, open_demonstrations

    out = tmp_path / "lerobot"
    collect(load_config(None, ["env.id=Reach-v0", "env.obs_mode=state", "env.num_envs=2", "policy.action_chunk=3"]),
            episodes=2, out=out, data_format="lerobot")
    data = open_demonstrations(out, ReadOptions(action_chunk=3))
    table = pq.read_table(sorted(out.glob("data/**/*.parquet"))).to_pydict()
    frames = sorted(zip(table["episode_index"], table["frame_index"], table["next.reward"]))
    rewards = np.zeros((len(frames), 3), dtype=np.float32)
    for i, (e, f, _) in enumerate(frames):  # frame i's chunk runs frames i, i+1, i+2 of its episode
        for k in range(3):
            later = [r for e2, f2, r in frames if e2 == e and f2 == f + k]
            rewards[i, k] = np.ravel(later[0])[0] if later else 0.0
    np.testing.assert_allclose(data.rewards, rewards)
    assert data.episode_success.tolist() == [True] * len(frames)  # collect keeps successes
    replay = demo_replay(data, ["states"], gamma=0.9)
    assert len(replay) == len(frames)  # every frame's chunk: a successful episode's last ones terminate
    lengths = {e: sum(1 for e2, _, _ in frames if e2 == e) for e, _, _ in frames}
    ending = sum(1 for e, f, _ in frames if f + 3 >= lengths[e])  # no chunk after theirs: they terminate
    assert int((~replay.storage["bootstrap"]).sum()) == ending == 2 * 3


def test_a_list_of_folders_fills_one_replay_with_no_transition_across_them(tmp_path, demos):
    """``algorithm.demos`` as a list: each folder's transitions as alone, none from one folder's last row into the
    next folder's first (their episode numbers overlap on disk: both start at 0)."""
    other = write(tmp_path / "other", [episode(0, 2, True)])
    both = open_demos([str(demos), str(other)], C)
    alone = [demo_replay(DemoDataset(d), ["states"], gamma=0.9) for d in (demos, other)]
    replay = demo_replay(both, ["states"], gamma=0.9)
    assert len(replay) == len(alone[0]) + len(alone[1]) == 6
    for key in ("obs/states", "next_obs/states", "reward", "discount", "bootstrap", "actions"):
        joined = torch.cat([a.storage[key][:len(a)] for a in alone])
        assert torch.equal(replay.storage[key][:len(replay)], joined), key
    with pytest.raises(ConfigError, match="algorithm.demos: .*nowhere.*does not exist"):
        open_demos([str(demos), str(tmp_path / "nowhere")], C)

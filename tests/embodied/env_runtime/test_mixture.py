"""Env mixtures: several env ids in one training batch (``env.id`` a list or a named set).

The split of the batch over members is a pure function (shares by weights, each member at least one env); every
episode carries its member's id, logged as ``env/<id>/*``; members whose spaces differ are refused before any
worker starts; eval runs each member's own eval (``eval/<id>/*``, pooled ``eval/*``); a replaced env worker runs the
same members (a faulted run equals the clean one, member by member).
"""

from __future__ import annotations

import numpy as np
import pytest

import embodied.runs.train as runner
from embodied.config import ConfigError, load_config
from embodied.config.schema import EnvConfig, split_counts
from embodied.core.registry import ENV_SETS
from embodied.env_runtime.factory import check_env_config, make_vector_env
from embodied.env_runtime.mixture import ConcatBatchedEnv, member_slices
from embodied.evaluation.stats import episode_metrics
from embodied.core.types import EpisodeStats

PUSH, PICK = "Push-v0", "PickPlace-v0"  # the built-in tasks with the same spaces (20-D state, 4-D action)


@pytest.mark.parametrize("total,weights,expected", [
    (10, [1, 1, 1], [4, 3, 3]), (8, [3, 1], [6, 2]), (4, [10, 1, 1], [2, 1, 1]), (5, [1], [5]), (3, [1, 1, 1], [1, 1, 1]),
])
def test_the_batch_is_split_by_weights_with_an_env_for_every_member(total, weights, expected):
    assert split_counts(total, weights) == expected


def test_the_split_refuses_fewer_envs_than_members_and_non_positive_weights():
    with pytest.raises(ValueError, match="2 envs cannot give each of 3 members one"):
        split_counts(2, [1, 1, 1])
    with pytest.raises(ValueError, match="positive"):
        split_counts(4, [1, 0])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_env_workers_slices_cover_each_member_exactly_once(workers):
    cfg = EnvConfig(id=[PUSH, PICK, "Reach-v0"], num_envs=7, weights=[1, 2, 1])
    counts = dict(zip(cfg.members(), cfg.member_counts()))
    bounds = np.linspace(0, 7, workers + 1).astype(int)
    seen: dict[str, list[int]] = {}
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        for part in member_slices(cfg, int(lo), int(hi - lo)):
            seen.setdefault(part.env_id, []).extend(range(part.first_index, part.first_index + part.num_envs))
    assert {k: sorted(v) for k, v in seen.items()} == {k: list(range(n)) for k, n in counts.items()}


def test_a_named_set_is_a_mixture_of_its_ids():
    name = "libero-pro-object"
    if name not in ENV_SETS:
        pytest.skip("LIBERO-PRO is not installed")
    cfg = EnvConfig(id=name, num_envs=20)
    assert cfg.members() == list(ENV_SETS.resolve(name)) and sum(cfg.member_counts()) == 20


def test_members_with_other_spaces_are_refused_naming_both_and_the_key():
    with pytest.raises(ConfigError, match=r"env.id: the mixture's members Reach-v0 and Push-v0 differ in their "
                                          r"observations, observation key 'states'"):
        check_env_config(EnvConfig(id=["Reach-v0", PUSH], num_envs=4))


def test_bad_mixture_fields_are_named():
    with pytest.raises(ConfigError, match=r"env.weights: 3 weights for the 2 members \(Push-v0, PickPlace-v0\)"):
        check_env_config(EnvConfig(id=[PUSH, PICK], weights=[1, 1, 1]))
    with pytest.raises(ConfigError, match=r"env.num_envs / env.weights: 1 envs cannot give each of 2 members one"):
        check_env_config(EnvConfig(id=[PUSH, PICK], num_envs=1))
    with pytest.raises(ConfigError, match="env.weights: shares of a mixture's members"):
        check_env_config(EnvConfig(id=PUSH, weights=[1.0]))
    with pytest.raises(ConfigError, match=r"env.id: unknown env 'Psh-v0'.*Push-v0.*Named sets"):
        load_config(None, ["env.id=[Push-v0,Psh-v0]"])


@pytest.mark.parametrize("vectorization", ["native", "per_env"])
def test_each_episode_names_its_member_and_the_metrics_split_by_member(vectorization):
    cfg = EnvConfig(id=[PUSH, PICK], num_envs=6, weights=[2, 1], max_episode_steps=5, vectorization=vectorization)
    venv = make_vector_env(cfg, 4, first_index=2)  # a second env worker's slice: 2 Push envs, then 2 PickPlace
    try:
        assert isinstance(venv, ConcatBatchedEnv) == (vectorization == "native")
        venv.reset(seed=3)
        episodes = []
        for _ in range(3):
            episodes += venv.chunk_step(np.zeros((4, 2, 4), np.float32)).episodes
    finally:
        venv.close()
    assert sorted((e.env_index, e.env_id) for e in episodes if e.length == 5) == [
        (0, PUSH), (1, PUSH), (2, PICK), (3, PICK)]
    metrics = episode_metrics("env", episodes)
    assert metrics["env/episodes"] == len(episodes)
    assert metrics[f"env/{PUSH}/episodes"] + metrics[f"env/{PICK}/episodes"] == len(episodes)


def test_a_native_mixture_snapshot_restores_every_member():
    cfg = EnvConfig(id=[PUSH, PICK], num_envs=4, max_episode_steps=20)
    venv = make_vector_env(cfg, 4)
    try:
        venv.reset(seed=0)
        venv.chunk_step(np.full((4, 2, 4), 0.3, np.float32))
        state = venv.get_state()
        after = venv.chunk_step(np.full((4, 2, 4), -0.5, np.float32))
        venv.set_state(state)
        again = venv.chunk_step(np.full((4, 2, 4), -0.5, np.float32))
    finally:
        venv.close()
    np.testing.assert_array_equal(after.obs["states"], again.obs["states"])


def test_episode_metrics_outside_a_mixture_have_no_member_keys():
    metrics = episode_metrics("env", [EpisodeStats(0, 1.0, 3, True, True)])
    assert not [k for k in metrics if k.count("/") > 1]


def mixture_run(tmp_path, *overrides):
    return runner.train(load_config(None, [
        f"env.id=[{PUSH},{PICK}]", "env.num_envs=6", "env.weights=[2,1]", "env.max_episode_steps=8",
        "cluster.num_env_workers=2", "policy.type=mlp", "policy.hidden_sizes=[16]", "policy.action_chunk=2",
        "rollout.chunk_steps=4", "runner.iterations=2", "runner.eval_every=2", "runner.eval_episodes=3",
        "eval_env.num_envs=3", "runner.checkpoint_every=0", "logger.backends=[console]", "logger.progress_bar=false",
        "runner.plot=false", f"experiment.output_dir={tmp_path}", *overrides]))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [
    ("algorithm.name=ppo", "algorithm.num_minibatches=1"),
    ("algorithm.name=sac", "policy.type=mlp", "algorithm.learning_starts=8", "algorithm.batch_size=8"),
    ("algorithm.name=dagger", "env.vectorization=per_env", "policy.action_chunk=1", "algorithm.learning_starts=8",
     "algorithm.batch_size=8", "algorithm.demos=null"),
    ("algorithm.name=grpo", "algorithm.group_size=2", "env.auto_reset=false", "algorithm.num_minibatches=1"),
], ids=["ppo", "sac", "dagger", "grpo"])
def test_every_algorithm_trains_on_a_mixture_and_logs_each_member(tmp_path, algorithm):
    result = mixture_run(tmp_path, *algorithm)
    last = result.history[-1]
    for member in (PUSH, PICK):
        assert last[f"eval/{member}/episodes"] == 3
    assert last["eval/episodes"] == 6  # pooled over the members' own evals
    episodes = {m: sum(r.get(f"env/{m}/episodes", 0) for r in result.history) for m in (PUSH, PICK)}
    assert episodes[PUSH] == 2 * episodes[PICK] > 0  # 4 Push envs and 2 PickPlace envs, episodes of 8 steps
    assert sum(r["env/episodes"] for r in result.history) == sum(episodes.values())


FAULTY = "tests.toy_envs:FaultyEnv"


def test_a_replaced_env_worker_keeps_its_members_and_the_run_is_the_clean_one(tmp_path):
    marker = tmp_path / "fault.marker"

    def run(folder):
        return runner.train(load_config(None, [
            f"env.id=[{FAULTY},tests.toy_envs:FaultyTwinEnv]", "env.num_envs=4", "env.max_episode_steps=6",
            f"env.kwargs={{fault: raise, fault_at: 11, marker: '{marker}'}}", "eval_env.kwargs={}",
            "eval_env.num_envs=2", "env.preflight=false", "cluster.num_env_workers=2", "policy.type=mlp",
            "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4", "algorithm.num_minibatches=2",
            "runner.iterations=3", "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=0",
            "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
            "runner.faults.restart_backoff_s=0", f"experiment.output_dir={folder}"]))

    faulted = run(tmp_path / "faulted")
    assert marker.exists() and faulted.history[-1]["workers/restarts"] == 1.0
    clean = run(tmp_path / "clean")
    for mf, mc in zip(faulted.history, clean.history, strict=True):
        keys = [k for k in mc if k.startswith("env/tests.toy_envs:") or k in ("env/return", "train/loss")]
        assert len(keys) > 2
        for key in keys:
            assert mf[key] == mc[key] or (np.isnan(mf[key]) and np.isnan(mc[key])), key


@pytest.mark.slow
def test_a_mixture_trains_on_ray_with_the_same_members(tmp_path, ray_session):
    result = mixture_run(tmp_path, "cluster.backend=ray", "algorithm.num_minibatches=1")
    episodes = {m: sum(r.get(f"env/{m}/episodes", 0) for r in result.history) for m in (PUSH, PICK)}
    assert episodes[PUSH] == 2 * episodes[PICK] > 0
    assert result.history[-1][f"eval/{PICK}/episodes"] == 3


def test_grpo_groups_must_sit_in_one_member():
    with pytest.raises(ConfigError, match=r"the members' shares of env.num_envs are \[12, 4\], not all multiples of "
                                          r"group_size=8"):
        load_config(None, ["algorithm.name=grpo", "algorithm.group_size=8", f"env.id=[{PUSH},{PICK}]",
                           "env.num_envs=16", "env.weights=[3,1]", "env.auto_reset=false"])
    cfg = load_config(None, ["algorithm.name=grpo", "algorithm.group_size=8", f"env.id=[{PUSH},{PICK}]",
                             "env.num_envs=16", "env.auto_reset=false"])
    assert cfg.env.member_counts() == [8, 8]


@pytest.mark.slow
def test_collect_and_sft_on_a_mixture_evaluate_each_member(tmp_path):
    from embodied.runs.collect import collect
    from embodied.runs.sft import sft

    overrides = [f"env.id=[{PUSH},{PICK}]", "env.num_envs=4", "env.max_episode_steps=60", "env.vectorization=per_env",
                 "env.auto_reset=false", "eval_env.num_envs=2", "policy.type=mlp", "policy.hidden_sizes=[16]",
                 "runner.eval_episodes=2", "logger.backends=[console]", "logger.progress_bar=false",
                 "runner.plot=false", f"experiment.output_dir={tmp_path}", "sft.epochs=1", "sft.batch_size=8",
                 "sft.val_fraction=0", f"sft.dataset={tmp_path / 'demos'}"]
    cfg = load_config(None, overrides)
    collect(cfg, episodes=4, out=tmp_path / "demos", keep_failed=True)  # each member's expert, two envs each
    result = sft(load_config(None, overrides))
    assert result.final_eval["eval/episodes"] == 4
    assert result.final_eval[f"eval/{PUSH}/episodes"] == result.final_eval[f"eval/{PICK}/episodes"] == 2

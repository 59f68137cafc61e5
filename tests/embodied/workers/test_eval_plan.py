"""Fixed eval sets (a suite's task x init state) and seeded eval episodes: which env plays what, when."""

from __future__ import annotations

import pytest

from embodied.backends import LocalBackend
from embodied.config import ConfigError, load_config
from embodied.core.registry import POLICIES
from embodied.core.types import EvalEpisode
from embodied.workers.eval_plan import EvalPlan, env_eval_episodes, spread
from embodied.workers.evaluator import Evaluator
from embodied.workers.group import Workers
from tests.toy_envs import EpisodeSetEnv

POLICIES.register("echo", "tests.toy_policies:EchoConfig")
SUITE = "tests.toy_envs:EpisodeSetEnv"


def fixed(tasks: int = 3, states: int = 4) -> list[EvalEpisode]:
    return EpisodeSetEnv.eval_episodes(tasks=tasks, states=states)


def test_spread_covers_tasks_and_states_evenly():
    assert spread(fixed(), 12) == list(range(12))
    assert spread(fixed(), 20) == list(range(12))  # more than the set: the set once
    assert spread(fixed(), 6) == [0, 2, 4, 6, 8, 10]  # two states of each of the three tasks
    assert spread(fixed(), 3) == [0, 4, 8]  # one episode per task
    assert [fixed()[i].options["task_id"] for i in spread(fixed(), 7)] == [0, 0, 0, 1, 1, 2, 2]


def test_a_seeded_plan_is_round_major_and_a_fixed_plan_keeps_each_env_on_a_run_of_episodes():
    seeded = EvalPlan.make(n_envs=4, episodes=6)
    assert seeded.rounds == 2 and seeded.episode_ids(1) == [4, 5, 6, 7] and seeded.options(0) is None
    plan = EvalPlan.make(n_envs=4, episodes=12, fixed=fixed())
    assert plan.rounds == 3
    assert [plan.episode_ids(r) for r in range(3)] == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
    # env 0 plays task 0's states 0, 1, 2: no task change within an env's run but at run edges
    assert [plan.options(r)[0] for r in range(3)] == [{"task_id": 0, "init_state": k} for k in range(3)]
    assert plan.recorded(max_videos=10) == [0, 4, 8]  # the first episode of each task
    assert plan.recorded(max_videos=2) == [0, 4]


def test_fillers_repeat_their_env_s_last_episode_and_are_never_reported():
    plan = EvalPlan.make(n_envs=4, episodes=5, fixed=fixed())  # 2 rounds, 8 slots, 3 fillers
    assert plan.episodes == 5 and [plan.episode_ids(1)] == [[1, 3, 5, 7]]
    assert plan.options(1)[2] == plan.options(0)[2] == dict(plan.fixed[4].options)  # env 2: episode 4, then filler
    assert plan.options(1)[3] == dict(plan.fixed[4].options)  # env 3 has nothing of its own: the last episode
    assert plan.task_of(5) is None and plan.options_of(4) == {"task_id": 2, "init_state": 1}


def test_an_env_without_a_published_set_has_none():
    cfg = load_config(None, ["env.id=tests.toy_envs:CountingEnv"])
    assert env_eval_episodes(cfg.env) is None
    cfg = load_config(None, [f"env.id={SUITE}", "env.kwargs={tasks: 2, states: 3}"])
    assert [e.options for e in env_eval_episodes(cfg.env)][-1] == {"task_id": 1, "init_state": 2}


@pytest.fixture
def local_backend():
    backend = LocalBackend()
    yield backend
    backend.shutdown()


def suite_config(*extra: str):
    return load_config(None, [f"env.id={SUITE}", "env.num_envs=4", "eval_env.num_envs=3", "env.max_episode_steps=4",
                              "cluster.num_env_workers=2", "cluster.num_rollout_workers=2", "policy.type=echo",
                              "policy.action_chunk=2", *extra])


def test_the_evaluator_plays_the_suite_s_episodes_in_index_order_with_few_task_changes(local_backend):
    EpisodeSetEnv.builds.clear()
    evaluator = Evaluator.start(suite_config(), local_backend)
    assert sorted(EpisodeSetEnv.builds) == [(0, 0), (1, 1), (2, 2)]  # each eval env built with its batch index
    evaluator.load_checkpoint({"policy": evaluator.rollout_group.workers[0].policy.state_dict()})
    EpisodeSetEnv.builds.clear()
    episodes = evaluator.run(episodes=7)
    chosen = [fixed()[i] for i in spread(fixed(), 7)]
    assert [e.env_index for e in episodes] == list(range(7))
    assert [e.episode_return / e.length for e in episodes] == [
        100 * c.options["task_id"] + c.options["init_state"] for c in chosen]
    assert [e.task for e in episodes] == [c.task for c in chosen]
    # 3 envs (built on tasks 0, 1, 2) over runs of 3 episodes (tasks 0,0,0 | 1,1,2 | 2 + fillers): one task change
    assert EpisodeSetEnv.builds == [(1, 2)]
    assert [e.episode_return for e in evaluator.run(episodes=7)] == [e.episode_return for e in episodes]
    evaluator.close()


def test_training_envs_get_their_index_in_the_whole_batch(local_backend):
    EpisodeSetEnv.builds.clear()
    workers = Workers.start(suite_config("eval_env.num_envs=2"), local_backend)
    # 4 training envs over 2 env workers (indices 0-1 and 2-3), 2 eval envs over 2 workers (0 and 1)
    assert sorted(i for i, _ in EpisodeSetEnv.builds) == [0, 0, 1, 1, 2, 3]
    workers.close()


def test_envs_that_need_more_memory_than_there_is_stop_before_any_worker(local_backend, monkeypatch):
    monkeypatch.setattr(EpisodeSetEnv, "footprint", type(EpisodeSetEnv.footprint)(rss_mib=10**9, build_s=0.0))
    EpisodeSetEnv.builds.clear()
    with pytest.raises(ConfigError, match=r"env.num_envs: the envs \(tests.toy_envs:EpisodeSetEnv\) need about .* GiB \(env.num_envs=4 x .* "
                                          r"\+ eval_env.num_envs=3 .* is available on this machine. Fix: fewer envs"):
        Workers.start(suite_config(), local_backend)
    assert EpisodeSetEnv.builds == [] and local_backend._groups == []

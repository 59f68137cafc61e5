"""A fault that replays: the exact replay of an epoch fails in the same env with the same error.

``ReplayFaultEnv`` raises at its 11th step after a reset with seed 1 (env 1 of the batch, in env
worker 0): its own state, so every replay from the epoch's snapshot fails the same way. The second,
identical failure makes the run rebuild worker 0's envs from fresh seeds, count their episodes in
``env/episodes_dropped`` and go on; worker 1 still redoes the epoch exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import embodied.runs.train as runner
from embodied.backends import LocalBackend
from embodied.checkpoint.store import load_checkpoint
from embodied.config import ConfigError, load_config
from embodied.core.types import EnvError
from embodied.workers.faults import WorkerFailure
from embodied.workers.group import Workers
from embodied.core import seeds
from embodied.workers.restarts import RestartBudget, RestartRateError

REPLAY = "tests.toy_envs:ReplayFaultEnv"


def replay_config(out: Path, *overrides: str):
    """3 iterations of PPO on 4 envs, 2 env workers; 8 sub-steps per env per iteration, so env 1 (seed 1)
    fails in iteration 2, at chunk step 1."""
    return load_config(None, [
        f"env.id={REPLAY}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "env.kwargs={fail_seed: 1, fail_at: 11}", "eval_env.kwargs={fail_seed: -1}", "env.preflight=false",
        "cluster.num_env_workers=2", "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2",
        "rollout.chunk_steps=4", "algorithm.num_minibatches=2", "algorithm.update_epochs=2", "runner.iterations=3",
        "runner.eval_every=0", "runner.eval_episodes=2", "runner.checkpoint_every=0", "logger.backends=[console]",
        "logger.progress_bar=false", "runner.plot=false", "runner.faults.restart_backoff_s=0", f"experiment.output_dir={out}",
        *overrides,
    ])


def assert_same_params(a, b) -> None:
    pa, pb = load_checkpoint(a.checkpoint)["actor"]["policy"], load_checkpoint(b.checkpoint)["actor"]["policy"]
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def check_replayed_run(tmp_path: Path, capfd, *overrides: str) -> list[dict[str, float]]:
    """Two same-seed runs with the replaying fault: both complete, count the drop, and match; the first's metrics.
    After a Ray run, the second runs on the local backend with the same placement: Ray gives the local bits, so
    this also holds across backends, without a second Ray start."""
    first = runner.train(replay_config(tmp_path / "a", *overrides))
    err = capfd.readouterr().err
    second = runner.train(replay_config(tmp_path / "b", *(o for o in overrides if o != "cluster.backend=ray")))
    n = len(first.history)
    assert [m["workers/restarts"] for m in first.history] == [0.0, 2.0, 2.0][:n]  # the replay, then fresh envs
    assert [m["env/episodes_dropped"] for m in first.history] == [0.0, 2.0, 2.0][:n]  # worker 0's two envs
    assert [m["env_steps"] for m in first.history] == [32.0, 64.0, 96.0][:n]  # every kept epoch whole
    assert "[restart 1; 1/3 within 20 iterations] iteration 2: env worker 0" in err and "ZeroDivisionError" in err
    assert "[restart 2; 2/3 within 20 iterations] iteration 2: env worker 0" in err
    assert "again on the exact replay" in err
    assert err.count("deterministic bug of the env") == 1  # the reason, once
    assert load_checkpoint(first.checkpoint)["episodes_dropped"] == 2
    assert_same_params(first, second)  # same seed, same run
    for ma, mb in zip(first.history, second.history, strict=True):
        kept = [k for k in ma if k.startswith(("env/", "train/", "eval/")) or k == "env_steps"]
        assert {k: ma[k] for k in kept} == {k: mb[k] for k in kept}
    return first.history


def test_a_fault_that_replays_rebuilds_the_workers_envs_from_fresh_seeds_local(tmp_path, capfd):
    check_replayed_run(tmp_path, capfd)


@pytest.mark.slow
def test_a_fault_that_replays_rebuilds_the_workers_envs_from_fresh_seeds_ray(tmp_path, capfd, ray_session):
    """Two iterations (the fault is in the second); the runs also log each worker process's memory."""
    history = check_replayed_run(tmp_path, capfd, "cluster.backend=ray", "cluster.placement=disaggregated",
                                 "runner.iterations=2")
    names = sorted(k.removeprefix("sys/rss_mib/") for k in history[-1] if k.startswith("sys/rss_mib/"))
    assert names == ["actor0", "driver", "env0", "env1", "eval_env0", "eval_env1", "rollout0"]
    assert all(50 < history[-1][f"sys/rss_mib/{n}"] < 1e5 for n in names)


def test_under_grpo_the_failed_workers_groups_are_reset_from_the_fresh_seed(tmp_path, capfd):
    """GRPO resets every env before each epoch (iteration 2: seeds.iteration_seed(0, 2) for group 0, envs 0-1); the redone
    epoch resets the failed worker's envs from the fresh seed instead, group by group."""

    result = runner.train(replay_config(
        tmp_path, f"env.kwargs={{fail_seed: {seeds.iteration_seed(0, 2)}, fail_at: 3}}", "algorithm.name=grpo",
        "algorithm.group_size=2", "env.auto_reset=false", "algorithm.num_minibatches=1"))
    assert [(m["workers/restarts"], m["env/episodes_dropped"]) for m in result.history] == [(0, 0), (2, 2), (2, 2)]
    assert "again on the exact replay" in capfd.readouterr().err


def test_the_restart_rate_still_bounds_a_fault_that_replays(tmp_path, capfd):
    with pytest.raises(RestartRateError) as info:
        runner.train(replay_config(tmp_path, "runner.faults.max_worker_restarts=1"))
    assert "runner.faults.max_worker_restarts=1 within runner.faults.restart_window=20 iterations (restarts at iterations 2" in \
        str(info.value)
    assert "[restart 2;" not in capfd.readouterr().err


def test_a_negative_restart_budget_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="runner.faults.max_worker_restarts: must be >= 0"):
        load_config(None, ["runner.faults.max_worker_restarts=-1"])
    with pytest.raises(ValueError, match="runner.faults.max_worker_restarts: must be >= 0"):
        RestartBudget(-1)  # built by code, not from a config


def test_the_redone_epoch_keeps_the_other_workers_exact_and_starts_the_failed_ones_envs_afresh(tmp_path):
    """Rows of the trajectory: envs 2-3 (worker 1) as in a run whose env never fails; envs 0-1 (worker 0)
    new episodes from the fresh seeds, from their first step on; nothing of the failed attempts kept."""
    def rollouts(fail_seed: int) -> tuple[list, Workers]:
        cfg = replay_config(tmp_path, f"env.kwargs={{fail_seed: {fail_seed}, fail_at: 11}}")
        backend = LocalBackend()
        workers = Workers.start(cfg, backend)
        try:
            states = [workers.take_trajectories(workers.rollout(4, it))[0].forward_inputs["states"] for it in (1, 2)]
        finally:
            workers.close()
            backend.shutdown()
        return states, workers

    (faulted1, faulted2), workers = rollouts(fail_seed=1)
    (clean1, clean2), _ = rollouts(fail_seed=-1)
    assert torch.equal(faulted1, clean1)
    assert torch.equal(faulted2[:, 2:], clean2[:, 2:])  # [T, N, (t, episode, first seed)]
    fresh = workers.fresh_seed(2)
    assert fresh == seeds.fresh_seed(0, 2)
    assert faulted2[0, :2, 0].tolist() == [0.0, 0.0]  # step 0 of new episodes
    # Seeded afresh (the state holds the first reset seed, as float32): the worker's envs 0 and 1.
    assert torch.equal(faulted2[0, :2, 2], torch.tensor([fresh, fresh + 1], dtype=torch.float32))
    assert clean2[0, :2, 2].tolist() == [0.0, 1.0]
    assert workers.restarts.used == 2 and workers.restarts.episodes_dropped == 2


def test_same_fault_compares_worker_env_place_and_error_but_not_addresses():
    def failure(rank: int, index: int, step: int, line: str) -> WorkerFailure:
        error = EnvError("Toy-v0", index, "step() at sub-step 0 of the chunk", f"Traceback ...\n{line}\n",
                         f"env worker {rank}, iteration 2, chunk step {step}")
        return WorkerFailure("env", "Toy-v0", {rank}, error)

    same = failure(0, 1, 1, "ValueError: bad body <Body at 0x7f12>").signature
    assert failure(0, 1, 1, "ValueError: bad body <Body at 0x7e99>").signature == same
    assert failure(1, 1, 1, "ValueError: bad body <Body at 0x7f12>").signature != same  # another worker
    assert failure(0, 0, 1, "ValueError: bad body <Body at 0x7f12>").signature != same  # another env
    assert failure(0, 1, 2, "ValueError: bad body <Body at 0x7f12>").signature != same  # another chunk step
    assert failure(0, 1, 1, "KeyError: 'x'").signature != same  # another error


def start_evaluator(backend: LocalBackend, fail_seed: int):
    """4 eval envs over 2 env workers of ``ReplayFaultEnv`` failing after a reset with ``fail_seed``; the echo policy."""
    from embodied.core.registry import POLICIES
    from embodied.workers.evaluator import Evaluator

    POLICIES.register("echo", "tests.toy_policies:EchoConfig", overwrite=True)
    cfg = load_config(None, [f"env.id={REPLAY}", "env.num_envs=4", "eval_env.num_envs=4", "env.max_episode_steps=5",
                             f"eval_env.kwargs={{fail_seed: {fail_seed}, fail_at: 3}}", "env.preflight=false",
                             "cluster.num_env_workers=2", "policy.type=echo", "policy.action_chunk=2",
                             "experiment.seed=7", "runner.faults.restart_backoff_s=0"])
    evaluator = Evaluator.start(cfg, backend)
    evaluator.load_checkpoint({"policy": evaluator.rollout_group.workers[0].policy.state_dict()})
    return evaluator


def test_an_eval_fault_that_replays_leaves_those_episodes_out_and_keeps_the_fixed_seeds_of_the_rest(capfd):
    """Eval episode 1 (env 1, in eval env worker 0) raises at its 3rd step, on every redo of its round. The
    round is redone once exactly, then worker 0 plays from fresh seeds: its episodes 0 and 1 are left out
    (listed in ``dropped``); episodes 2-5 are those of an eval without the fault."""
    from embodied.evaluation.stats import EvalReport, EvalSummary, format_table, per_task
    from embodied.workers.launch import EVAL_SEED_OFFSET

    backend = LocalBackend()
    try:
        clean = start_evaluator(backend, -1).run(episodes=6)
        evaluator = start_evaluator(backend, 7 + EVAL_SEED_OFFSET + 1)
        episodes = evaluator.run(episodes=6)  # round 0: episodes 0-3 (the fault); round 1: 4, 5 and two fillers
        assert evaluator.dropped == [0, 1] and [e.env_index for e in episodes] == [2, 3, 4, 5]
        assert episodes == clean[2:]  # the fixed seeds' episodes, whole
        assert evaluator.restarts.used == 2 and evaluator.restarts.episodes_dropped == 0  # not training's count
        err = capfd.readouterr().err
        assert "[restart 2; 2/3 within 20 iterations] eval episodes from 0: eval_env worker 0" in err
        assert "again on the exact replay" in err
        assert "leaving its 2 eval episode(s) of this round out of the eval" in err
        again = evaluator.run(episodes=6)  # every run: the same episodes kept, the same left out
        assert evaluator.dropped == [0, 1] and again == episodes
        assert evaluator.restarts.used == 3  # the fault is known to replay: one restart, no exact redo
        # What `embodied eval` reports (eval.json and its table): the episodes left out, not counted as failures.
        report = EvalReport("ckpt", 1, REPLAY, [evaluator.eval_seed(e.env_index) for e in episodes],
                            EvalSummary.of(episodes), per_task(episodes), episodes, dropped=list(evaluator.dropped))
        assert report.to_json()["episodes_dropped"] == [0, 1] and report.to_json()["num_episodes"] == 4
        assert "2 episode(s) left out, not counted as failures" in format_table(report)
    finally:
        backend.shutdown()


def check_periodic_eval_fault(tmp_path: Path, capfd, *overrides: str) -> None:
    """The same eval fault at both evals of a 2-iteration run: each eval leaves 2 of its 4 episodes out
    (``eval/episodes_dropped``), the first after an exact redo, the second at once; the training envs lose nothing."""
    eval_fault = f"eval_env.kwargs={{fail_seed: {1 + 1_000_000}, fail_at: 3}}"  # eval episode 1 of seed 0
    overrides = ("env.kwargs={fail_seed: -1}", eval_fault, "eval_env.num_envs=4", "runner.eval_episodes=4",
                 "runner.eval_every=1", "runner.iterations=2", *overrides)
    result = runner.train(replay_config(tmp_path / "a", *overrides))
    assert [m["eval/episodes_dropped"] for m in result.history] == [2.0, 2.0]
    assert [m["eval/episodes"] for m in result.history] == [2.0, 2.0]
    assert [m["env/episodes_dropped"] for m in result.history] == [0.0, 0.0]
    assert "eval/failed" not in result.history[-1]
    err = capfd.readouterr().err
    assert err.count("leaving its 2 eval episode(s) of this round out") == 2
    assert "[restart 2; 2/3 within 20 iterations] eval episodes from 0 at iteration 1" in err  # exact, then fresh
    assert "[restart 3; 3/3 within 20 iterations] eval episodes from 0 at iteration 2" in err  # fresh at once
    assert "[restart 4" not in err


def test_periodic_eval_reports_the_episodes_a_replayed_fault_left_out_and_training_goes_on_local(tmp_path, capfd):
    check_periodic_eval_fault(tmp_path, capfd)


@pytest.mark.slow
def test_periodic_eval_reports_the_episodes_a_replayed_fault_left_out_and_training_goes_on_ray(tmp_path, capfd,
                                                                                                ray_session):
    check_periodic_eval_fault(tmp_path, capfd, "cluster.backend=ray", "cluster.placement=disaggregated")

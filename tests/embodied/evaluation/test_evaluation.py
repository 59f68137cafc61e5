"""Evaluation: Wilson intervals, per-task breakdowns, eval-only workers, reproducible checkpoint evals,
and periodic eval that never stops training."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from tests.toy_envs import CountingEnv
from tests.toy_policies import EchoConfig, EchoPolicy

from embodied.backends import LocalBackend
from embodied.checkpoint.store import save_checkpoint
from embodied.config import load_config
from embodied.core.registry import ENVS, POLICIES
from embodied.core.types import EpisodeStats
from embodied.env_runtime.factory import policy_spec
from embodied.evaluation.run import EvalProgress, evaluate_checkpoint
from embodied.evaluation.stats import EvalSummary, eval_metrics, format_table, per_task, wilson_interval
from embodied.policy.base import build_policy
from embodied.runs.train import train
from embodied.workers.evaluator import Evaluator
from embodied.workers.launch import EVAL_SEED_OFFSET

POLICIES.register("echo", "tests.toy_policies:EchoConfig")
COUNTING = "tests.toy_envs:CountingEnv"


class FailingStepEnv(CountingEnv):
    """Raises on its third step: an eval env that breaks mid-episode."""

    def step(self, action):
        if self.t >= 2:
            raise RuntimeError("simulator exploded")
        return super().step(action)


class FailingResetEnv(CountingEnv):
    """Builds (its first reset works) but fails on every later reset: the eval round's."""

    def reset(self, *, seed=None, options=None):
        if self.episode >= 0:
            raise RuntimeError("reset failed")
        return super().reset(seed=seed, options=options)


class BrokenRenderEnv(CountingEnv):
    def render(self):
        raise RuntimeError("no GL context")


class GreedyFailsConfig(EchoConfig):
    model_class: ClassVar[str] = f"{__name__}:GreedyFailsPolicy"


class GreedyFailsPolicy(EchoPolicy):
    """Samples fine, but raises when asked for deterministic (eval) actions."""

    def act(self, obs, deterministic=False):
        if deterministic:
            raise RuntimeError("policy broke in eval")
        return super().act(obs, deterministic)


ENVS.register("test-failing-step", FailingStepEnv, overwrite=True)
ENVS.register("test-failing-reset", FailingResetEnv, overwrite=True)
ENVS.register("test-broken-render", BrokenRenderEnv, overwrite=True)
POLICIES.register("test-greedy-fails", GreedyFailsConfig, overwrite=True)


def toy_config(tmp_path: Path, *overrides: str):
    """A seconds-long PPO run on CountingEnv with a small MLP, logging to the console only."""
    return load_config(None, [
        f"env.id={COUNTING}", "env.num_envs=4", "env.max_episode_steps=6", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "policy.action_chunk=2", "rollout.chunk_steps=4",
        "algorithm.num_minibatches=1", "algorithm.update_epochs=1", "runner.iterations=2", "runner.eval_every=1",
        "runner.eval_episodes=2", "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false",
        "runner.faults.restart_backoff_s=0", f"experiment.output_dir={tmp_path}", *overrides,
    ])


def stats(success: bool, task: str = "a", ret: float = 1.0, length: int = 5) -> EpisodeStats:
    return EpisodeStats(0, ret, length, success, success, task)


# -- statistics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("successes, n, low, high", [
    (5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (32, 32, 0.8928, 1.0), (1, 2, 0.0945, 0.9055),
])
def test_wilson_interval_matches_reference_values(successes, n, low, high):
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_wilson_interval_of_nothing_is_nan():
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_summary_and_per_task_breakdown():
    episodes = [stats(True, "red", 2.0, 4), stats(False, "red", 0.0, 6), stats(True, "blue", 1.0, 2)]
    s = EvalSummary.of(episodes)
    assert (s.episodes, s.success_rate, s.return_mean, s.episode_len) == (3, pytest.approx(2 / 3), 1.0, 4.0)
    assert s.success_ci95 == pytest.approx(wilson_interval(2, 3))
    tasks = per_task(episodes)
    assert list(tasks) == ["red", "blue"] and tasks["red"].success_rate == 0.5 and tasks["blue"].episodes == 1
    m = eval_metrics(episodes)
    assert m["eval/task/red/success_rate"] == 0.5 and m["eval/task/blue/success_rate"] == 1.0
    assert m["eval/success_ci_low"] < m["eval/success_rate"] < m["eval/success_ci_high"]
    assert not any("/task/" in k for k in eval_metrics(episodes[:2]))  # one task: no breakdown


# -- eval-only workers --------------------------------------------------------------------------


@pytest.fixture
def local_backend():
    backend = LocalBackend()
    yield backend
    backend.shutdown()


def test_evaluator_alone_builds_no_training_workers_and_repeats_itself(local_backend):
    cfg = load_config(None, [f"env.id={COUNTING}", "env.num_envs=8", "eval_env.num_envs=4",
                             "env.max_episode_steps=5", "cluster.num_env_workers=2", "cluster.num_rollout_workers=2",
                             "policy.type=echo", "policy.action_chunk=2", "experiment.seed=7"])
    evaluator = Evaluator.start(cfg, local_backend)
    assert len(local_backend._groups) == 2  # eval envs and rollout workers: no actor, no training envs
    evaluator.load_checkpoint({"policy": evaluator.rollout_group.workers[0].policy.state_dict()})
    episodes = evaluator.run(episodes=6)  # two rounds of four; the last round's two fillers are dropped
    assert [e.env_index for e in episodes] == list(range(6))
    # The echo policy plays its env's first reset seed: episode k of round 0 started from seed base + k.
    base = 7 + EVAL_SEED_OFFSET
    assert [e.episode_return / e.length for e in episodes[:4]] == [base + k for k in range(4)]
    assert evaluator.eval_seed(5) == base + 5
    again = evaluator.run(episodes=6)
    assert [(e.episode_return, e.length) for e in again] == [(e.episode_return, e.length) for e in episodes]
    evaluator.close()


def test_an_eval_shows_episodes_done_success_so_far_and_an_eta_round_by_round(local_backend, capsys):
    """`embodied eval` on LIBERO showed nothing for minutes: its bar moves as each round of eval_env.num_envs
    episodes ends, with the success rate so far."""
    cfg = load_config(None, [f"env.id={COUNTING}", "env.num_envs=4", "eval_env.num_envs=4", "env.max_episode_steps=5",
                             "env.kwargs={success_at: 3}", "policy.type=echo", "policy.action_chunk=2"])
    evaluator = Evaluator.start(cfg, local_backend)
    evaluator.load_checkpoint({"policy": evaluator.rollout_group.workers[0].policy.state_dict()})
    rounds: list[int] = []
    with EvalProgress(6, "eval") as bar:
        evaluator.run(episodes=6, progress=lambda episodes: (rounds.append(len(episodes)), bar(episodes)))
    evaluator.close()
    assert rounds == [4, 2]  # the last round's two fillers are not counted
    last = capsys.readouterr().out.split("\r")[-1]
    assert "eval" in last and "6/6" in last and "success=1.000" in last and "<00:00" in last  # elapsed<ETA


def test_a_periodic_eval_shows_its_bar_under_trainings_once_it_takes_seconds(tmp_path, capsys, monkeypatch):
    import embodied.evaluation.run as evaluation

    cfg = toy_config(tmp_path, "logger.progress_bar=true")
    with evaluation.PeriodicEval(None, cfg, tmp_path).progress_bar(1, 2) as shown:
        assert shown.bar.delay == 5.0 and not shown.bar.disable
    monkeypatch.setattr(evaluation, "PERIODIC_BAR_DELAY_S", 0.0)
    train(cfg)
    assert "eval @ it 2" in capsys.readouterr().out
    quiet = toy_config(tmp_path, "logger.progress_bar=false")
    with evaluation.PeriodicEval(None, quiet, tmp_path).progress_bar(1, 2) as hidden:
        assert hidden.bar.disable


def reach_checkpoint(tmp_path: Path, cfg) -> Path:
    """An untrained MLP policy for Reach, saved the way the runner saves one."""
    from embodied.envs.reach import ReachEnv

    env = ReachEnv()
    spec = policy_spec(env.observation_space, env.action_space)
    env.close()
    torch.manual_seed(3)
    policy = build_policy(cfg.policy, spec)
    return save_checkpoint(tmp_path / "checkpoints" / "iter_000001", {
        "iteration": 1, "env_steps": 0, "actor": {"policy": policy.state_dict(), "version": 1}})


def test_checkpoint_eval_is_reproducible_and_its_videos_decode(tmp_path):
    from tests.embodied.logging.test_video import decode

    cfg = load_config(Path(__file__).resolve().parents[3] / "configs" / "reach_mlp_ppo.yaml", [
        "eval_env.num_envs=3", "eval_env.max_episode_steps=12", "logger.video.size=64", "logger.video.max_videos=4"])
    checkpoint = reach_checkpoint(tmp_path, cfg)
    first = evaluate_checkpoint(cfg, checkpoint, episodes=5, out_dir=tmp_path / "a", video=True)
    second = evaluate_checkpoint(cfg, checkpoint, episodes=5, out_dir=tmp_path / "b")
    a, b = (json.loads((tmp_path / d / "eval.json").read_text()) for d in ("a", "b"))
    assert a["episodes"] == b["episodes"] and a["return_mean"] == b["return_mean"]  # recording changes nothing
    assert [e["seed"] for e in a["episodes"]] == [cfg.experiment.seed + EVAL_SEED_OFFSET + k for k in range(5)]
    assert a["num_episodes"] == 5 and list(a["per_task"]) == ["reach the red target"]
    assert 0.0 <= a["success_ci95"][0] <= a["success_rate"] <= a["success_ci95"][1] <= 1.0
    assert first.summary == second.summary
    assert "reach the red target" not in format_table(first)  # one task: only the "all" row
    # Videos: the first four episodes and their grid; each frame of the episode, terminal one included.
    names = sorted(Path(p).name for p in a["videos"])
    assert names == ["episode_000.mp4", "episode_001.mp4", "episode_002.mp4", "episode_003.mp4", "grid_000-002.mp4"]
    for k in range(4):
        video = decode(tmp_path / "a" / "videos" / f"episode_{k:03d}.mp4")
        assert video.shape == (a["episodes"][k]["length"] + 1, 64, 64, 3)
        assert video.mean() > 30 and video.std() > 10  # a scene, not a black or flat frame
    assert decode(tmp_path / "a" / "videos" / "grid_000-002.mp4").shape[1:] == (128, 128, 3)
    assert not list((tmp_path / "a").rglob("*.tmp"))


# -- periodic eval during training --------------------------------------------------------------


def test_a_failing_eval_does_not_stop_training(tmp_path):
    # env.preflight=false: the preflight would stop this run (on purpose: the eval env breaks); the runtime path is tested
    cfg = toy_config(tmp_path, "eval_env.id=test-failing-step", "runner.iterations=3", "env.preflight=false")
    with pytest.warns(UserWarning, match="(?s)eval at iteration 1 failed.*simulator exploded"):
        result = train(cfg)
    assert len(result.history) == 3
    assert result.history[0]["eval/failed"] == 1.0
    assert not any(k.startswith("eval/") for k in result.history[1])  # switched off after the failure
    assert result.checkpoint is not None and result.checkpoint.exists()


@pytest.mark.timeout(120)
def test_an_eval_env_failing_at_reset_does_not_hang_training(tmp_path):
    with pytest.warns(UserWarning, match="(?s)eval at iteration 1 failed.*reset failed"):
        # No restarts: a replacement's first reset (the eval round's) would work, as this env's first reset does.
        result = train(toy_config(tmp_path, "eval_env.id=test-failing-reset", "env.preflight=false",
                                  "runner.faults.max_worker_restarts=0"))  # see above
    assert result.history[0]["eval/failed"] == 1.0 and len(result.history) == 2


@pytest.mark.timeout(120)
def test_a_policy_failing_in_eval_releases_the_env_workers(local_backend):
    cfg = load_config(None, [f"env.id={COUNTING}", "env.num_envs=2", "env.max_episode_steps=4",
                             "cluster.num_env_workers=2", "policy.type=test-greedy-fails"])
    evaluator = Evaluator.start(cfg, local_backend)
    with pytest.raises(RuntimeError, match="policy broke in eval"):
        evaluator.run(episodes=2)
    evaluator.close()  # the env workers were told, so they are free to close (no channel timeout)


def test_a_renderer_that_raises_does_not_stop_training(tmp_path):
    cfg = toy_config(tmp_path, "eval_env.id=test-broken-render", "runner.eval_video=all", "env.preflight=false")
    with pytest.warns(UserWarning, match="rendering failed.*no GL context"):
        result = train(cfg)
    assert len(result.history) == 2
    assert all(np.isfinite(m["eval/success_rate"]) for m in result.history)
    assert not list(result.run_dir.rglob("*.mp4"))


@pytest.mark.parametrize("mode, iterations", [("all", (1, 2)), ("last", (2,))])
def test_periodic_eval_videos_land_in_the_run_dir(tmp_path, mode, iterations):
    cfg = toy_config(tmp_path, f"runner.eval_video={mode}", "logger.video.size=16", "logger.video.max_videos=2")
    result = train(cfg)
    videos = sorted(p.relative_to(result.run_dir).as_posix() for p in result.run_dir.rglob("*.mp4"))
    assert videos == [f"videos/iter_00000{i}/{n}" for i in iterations
                      for n in ("episode_000.mp4", "episode_001.mp4", "grid_000-001.mp4")]
    assert "time/eval" in result.history[0]


def test_eval_takes_overrides_after_its_flags(tmp_path, capsys, monkeypatch):
    from embodied.cli import main

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "reach_mlp_ppo.yaml")
    checkpoint = reach_checkpoint(tmp_path, cfg)
    monkeypatch.chdir(root)
    assert main(["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--episodes", "3",
                 "--out", str(tmp_path / "out"), "eval_env.num_envs=3", "eval_env.max_episode_steps=5"]) == 0
    report = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert report["num_episodes"] == 3 and all(e["length"] <= 5 for e in report["episodes"])
    with pytest.raises(SystemExit):  # an unknown flag is still argparse's error, not an override
        main(["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--nope"])
    assert "unrecognized arguments: --nope" in capsys.readouterr().err


def test_sampled_eval_repeats_itself_and_differs_from_greedy(tmp_path, capsys, monkeypatch):
    from embodied.cli import main

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "reach_mlp_ppo.yaml")
    checkpoint = reach_checkpoint(tmp_path, cfg)
    monkeypatch.chdir(root)
    args = ["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--episodes", "4",
            "eval_env.num_envs=2", "eval_env.max_episode_steps=10"]
    assert main([*args, "--sample"]) == 0 and main([*args, "--sample", "--out", str(tmp_path / "again")]) == 0
    assert main(args) == 0
    assert "on Reach-v0, sampled, seeds" in capsys.readouterr().out
    sampled = json.loads((tmp_path / "eval" / "iter_000001-sampled" / "eval.json").read_text())
    again = json.loads((tmp_path / "again" / "eval.json").read_text())
    greedy = json.loads((tmp_path / "eval" / "iter_000001" / "eval.json").read_text())
    assert sampled["deterministic"] is False and greedy["deterministic"] is True
    assert sampled["episodes"] == again["episodes"]  # seeded: the same sampled episodes every time
    assert [e["seed"] for e in sampled["episodes"]] == [e["seed"] for e in greedy["episodes"]]  # same initial states
    assert [e["return"] for e in sampled["episodes"]] != [e["return"] for e in greedy["episodes"]]
    # runner.eval_sample: true makes sampling the config's own way to evaluate, --sample or not
    assert main([*args, "runner.eval_sample=true", "--out", str(tmp_path / "by_config")]) == 0
    assert json.loads((tmp_path / "by_config" / "eval.json").read_text())["episodes"] == sampled["episodes"]


def test_evals_of_one_checkpoint_on_other_seeds_keep_their_own_eval_json(tmp_path, monkeypatch):
    """Three seeds' evals of one checkpoint once wrote one eval.json in turn: only the last seed's was kept."""
    from embodied.cli import main

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "reach_mlp_ppo.yaml")
    checkpoint = reach_checkpoint(tmp_path, cfg)
    (tmp_path / "config.yaml").write_text("experiment:\n  seed: 3\n")  # the run's own seed, as the runner saves it
    monkeypatch.chdir(root)
    args = ["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--episodes", "2",
            "eval_env.num_envs=2", "eval_env.max_episode_steps=5"]
    for seed in (3, 1, 2):
        assert main([*args, f"experiment.seed={seed}"]) == 0
    seeds = {name: [e["seed"] for e in json.loads((tmp_path / "eval" / name / "eval.json").read_text())["episodes"]]
             for name in ("iter_000001", "iter_000001-seed1", "iter_000001-seed2")}
    assert len({tuple(s) for s in seeds.values()}) == 3  # each seed's own episodes, none overwritten
    assert sorted(p.name for p in (tmp_path / "eval").iterdir()) == sorted(seeds)

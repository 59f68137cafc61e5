"""Several suites in one eval and runner.extra_evals, on toy envs: id lists and named sets, the table (Wilson
interval, drop from the base suite), eval.json's records, the shape check before any env is built, extra-eval
config validation and the eval/<suite>/* metrics a training run logs and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.toy_envs import EpisodeSetEnv

from embodied.backends import LocalBackend
from embodied.checkpoint.store import CheckpointError
from embodied.config import ConfigError, load_config
from embodied.core.registry import ENV_SETS, ENVS, UnknownNameError
from embodied.core.types import EpisodeStats
from embodied.evaluation.extra import extra_config, extra_eval_plan, suite_metrics
from embodied.evaluation.multi import check_suites, shape_problems
from embodied.evaluation.suites import (expand_suites, format_suite_table, plot_suites, suite_axis, suite_config,
                                       suite_rows)
from embodied.logging.plot import extra_eval_keys, plot_run
from embodied.runs.train import train


class ToyBase(EpisodeSetEnv):
    """A toy suite with two fixed tasks x two states, and its shapes known without building it."""

    @classmethod
    def eval_episodes(cls, **_: Any):
        return EpisodeSetEnv.eval_episodes(tasks=2, states=2)

    @classmethod
    def observation_shapes(cls, obs_mode: str = "state", **_: Any) -> dict[str, tuple[int, ...]]:
        return {"states": (3,)}

    @classmethod
    def suite_axis(cls) -> tuple[str, str]:
        return "toy-base", "base"


class ToySwap(ToyBase):
    @classmethod
    def suite_axis(cls) -> tuple[str, str]:
        return "toy-base", "swap"


class ToyWide(ToyBase):
    """Its states are wider than the checkpoint's: the check names the key."""

    @classmethod
    def observation_shapes(cls, obs_mode: str = "state", **_: Any) -> dict[str, tuple[int, ...]]:
        return {"states": (5,)}


class BrokenBuild(ToyBase):
    def __init__(self, obs_mode: str = "state", max_episode_steps: int = 0, env_index: int = 0) -> None:
        raise RuntimeError("this scene cannot be built")


ENVS.register("toy-base", ToyBase, overwrite=True)
ENVS.register("toy-swap", ToySwap, overwrite=True)
ENVS.register("toy-wide", ToyWide, overwrite=True)
ENV_SETS.register("toy-pro", ["toy-base", "toy-swap"], overwrite=True)


def episodes(successes: int, n: int, length: int = 5) -> list[EpisodeStats]:
    return [EpisodeStats(env_index=i, episode_return=float(i < successes), length=length, success_once=i < successes,
                         success_at_end=i < successes, task="t") for i in range(n)]


def test_suite_lists_expand_named_sets_once_each_and_unknown_names_list_the_known_ones():
    assert expand_suites("toy-base, toy-pro,toy-swap") == ["toy-base", "toy-swap"]
    assert expand_suites(["toy-pro"]) == ["toy-base", "toy-swap"]
    with pytest.raises(UnknownNameError, match="(?s)toy-bsae.*toy-base.*Named sets: .*toy-pro"):
        expand_suites("toy-bsae")
    with pytest.raises(ValueError, match="no suite named"):
        expand_suites(" , ")
    assert suite_axis("toy-swap") == ("toy-base", "swap")
    assert suite_axis("tests.toy_envs:CountingEnv") == ("tests.toy_envs:CountingEnv", "base")


def test_the_table_has_a_wilson_interval_and_the_drop_from_the_base_suite(tmp_path):
    rows = suite_rows({"toy-base": episodes(9, 10), "toy-swap": episodes(3, 10, length=7)})
    base, swap = rows
    assert base.axis == "base" and swap.axis == "swap" and swap.base == "toy-base"
    assert swap.drop == pytest.approx(0.6) and base.drop == pytest.approx(0.0)
    assert swap.summary.success_ci95 == pytest.approx((0.1078, 0.6032), abs=1e-3)  # Wilson, 3 of 10
    table = format_suite_table(rows, {"toy-gone": "its files are missing"})
    assert "toy-swap" in table and "+0.600" in table and "[0.108, 0.603]" in table and "7.0" in table
    assert "not evaluated: toy-gone: its files are missing" in table
    assert swap.to_json()["drop_from_base"] == pytest.approx(0.6)
    without_base = suite_rows({"toy-swap": episodes(3, 10)})
    assert without_base[0].drop is None
    assert plot_suites(rows, tmp_path / "suites.png").stat().st_size > 1000


def test_a_checkpoint_that_does_not_fit_a_suite_is_refused_before_any_env_is_built():
    cfg = load_config(None, ["env.id=toy-base", "env.num_envs=2"])
    spec = {"state_dim": 3, "image_shape": None, "wrist_image_shape": None}
    assert shape_problems(spec, suite_config(cfg, "toy-swap").resolved_eval_env()) == []
    configs = {i: suite_config(cfg, i) for i in ("toy-base", "toy-wide")}
    EpisodeSetEnv.builds.clear()
    with pytest.raises(CheckpointError, match=r"toy-wide: states is \[3\] in the checkpoint, \[5\] in toy-wide"):
        check_suites({"policy_spec": spec}, configs, Path("ckpt"))
    assert EpisodeSetEnv.builds == []


def test_extra_evals_validate_with_the_field_path():
    with pytest.raises(ConfigError, match=r"runner.extra_evals\[1\].id: unknown env 'toy-bsae'.*Named sets"):
        load_config(None, ["runner.extra_evals=[{id: toy-base}, {id: toy-bsae}]"])
    with pytest.raises(ConfigError, match=r"runner.extra_evals\[0\].episodes: must be >= 1"):
        load_config(None, ["runner.extra_evals=[{id: toy-base, episodes: 0}]"])
    with pytest.raises(ConfigError, match=r"runner.extra_evals\[0\].id: an env id or a named set"):
        load_config(None, ["runner.extra_evals=[{episodes: 3}]"])
    with pytest.raises(ConfigError, match=r"runner.extra_evals\[0\].*nope"):
        load_config(None, ["runner.extra_evals=[{id: toy-base, nope: 1}]"])
    with pytest.raises(ConfigError, match=r"runner.extra_evals: two entries log under one name"):
        load_config(None, ["runner.extra_evals=[{id: toy-base}, {id: toy-base, kwargs: {tasks: 1}}]"])
    with pytest.raises(ConfigError, match=r"runner.extra_evals\[0\].name: toy-pro is a named set"):
        load_config(None, ["runner.extra_evals=[{id: toy-pro, name: x}]"])
    cfg = load_config(None, ["env.id=toy-base", "runner.extra_evals=[{id: toy-pro, episodes: 3}, "
                             "{id: toy-base, name: toy-other-tasks, kwargs: {tasks: 1}}]"])
    plan = extra_eval_plan(cfg)
    assert [(s.name, s.env_id, s.episodes) for s in plan] == [
        ("toy-base", "toy-base", 3), ("toy-swap", "toy-swap", 3), ("toy-other-tasks", "toy-base", 10)]
    assert extra_config(cfg, plan[2]).resolved_eval_env().kwargs == {"tasks": 1}
    assert set(suite_metrics("toy-swap", episodes(1, 2))) == {
        f"eval/toy-swap/{k}" for k in ("success_rate", "ci_low", "ci_high", "return", "episode_len", "episodes")}


def test_a_run_logs_each_extra_eval_to_its_metrics_and_its_learning_curves(tmp_path):
    cfg = load_config(None, [
        "env.id=tests.toy_envs:CountingEnv", "env.num_envs=2", "env.max_episode_steps=4", "eval_env.num_envs=2",
        "policy.type=mlp", "policy.hidden_sizes=[8]", "rollout.chunk_steps=4", "algorithm.num_minibatches=1",
        "algorithm.update_epochs=1", "runner.iterations=2", "runner.eval_every=1", "runner.eval_episodes=2",
        "logger.backends=[console]", "logger.progress_bar=false", "runner.plot=false", "env.preflight=false",
        f"experiment.output_dir={tmp_path}", "runner.extra_evals=[{id: toy-pro, episodes: 3}]"])
    result = train(cfg)
    for row in result.history:
        assert row["eval/toy-base/episodes"] == 3.0 and 0.0 <= row["eval/toy-swap/success_rate"] <= 1.0
        assert "eval/success_rate" in row  # the training env's own eval goes on beside them
    logged = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("eval/toy-swap/success_rate" in row for row in logged if "eval/success_rate" in row)
    assert extra_eval_keys(logged) == ["eval/toy-base/success_rate", "eval/toy-swap/success_rate"]
    assert plot_run(result.run_dir).is_file()


def test_eval_suites_writes_one_table_one_eval_json_and_a_plot(tmp_path, capsys, monkeypatch):
    from tests.embodied.evaluation.test_evaluation import reach_checkpoint

    from embodied.cli import main
    from embodied.envs.reach import ReachEnv

    class FarReach(ReachEnv):
        @classmethod
        def suite_axis(cls) -> tuple[str, str]:
            return "Reach-v0", "far"

    ENVS.register("toy-reach-far", FarReach, overwrite=True)
    root = Path(__file__).resolve().parents[3]
    checkpoint = reach_checkpoint(tmp_path, load_config(root / "configs" / "reach_mlp_ppo.yaml"))
    monkeypatch.chdir(root)
    live_at_create: list[int] = []  # the groups alive on the shared backend as each new one is made

    class Spy(LocalBackend):
        def create(self, cls: type, args_per_rank: list[tuple], resources: Any = None) -> Any:
            live_at_create.append(len(self._groups))
            return super().create(cls, args_per_rank, resources)

    monkeypatch.setattr("embodied.evaluation.multi.make_backend", lambda cluster, user_code=(): Spy())
    out = tmp_path / "out"
    assert main(["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--suites",
                 "Reach-v0,toy-reach-far", "--episodes", "3", "--out", str(out), "eval_env.num_envs=3",
                 "logger.progress_bar=false", "--video", "logger.video.size=64", "logger.video.max_videos=1"]) == 0
    printed = capsys.readouterr().out
    assert "drop from base" in printed and "toy-reach-far" in printed and "far" in printed
    report = json.loads((out / "eval.json").read_text())
    rows = {r["env_id"]: r for r in report["suites"]}
    assert rows["Reach-v0"]["axis"] == "base" and rows["toy-reach-far"]["axis"] == "far"
    assert rows["toy-reach-far"]["drop_from_base"] == pytest.approx(
        rows["Reach-v0"]["success_rate"] - rows["toy-reach-far"]["success_rate"])
    assert [(e["suite"], e["axis"]) for e in report["episodes"]] == [("Reach-v0", "base")] * 3 + [
        ("toy-reach-far", "far")] * 3
    assert set(report["provenance"]) == {"Reach-v0", "toy-reach-far"} and (out / "suites.png").is_file()
    assert (out / "toy-reach-far" / "eval.json").is_file() and (out / "table.txt").read_text().startswith("suite")
    assert sorted(report["videos"]) == ["Reach-v0", "toy-reach-far"]  # videos per suite x axis, in its folder
    assert (out / "toy-reach-far" / "videos" / "episode_000.mp4").is_file()
    # Each suite's env and rollout workers end with it: one suite's workers at a time, not every suite's (GiBs each)
    assert live_at_create == [0, 1, 0, 1]
    ENVS.register("toy-broken", BrokenBuild, overwrite=True)  # raises when built: left out, and the table says why
    with pytest.warns(UserWarning, match="--suites toy-broken failed, the others go on"):
        assert main(["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--suites",
                     "Reach-v0,toy-broken", "--episodes", "2", "--out", str(tmp_path / "o2"), "eval_env.num_envs=2",
                     "env.preflight=false", "logger.progress_bar=false"]) == 0
    assert "not evaluated: toy-broken:" in capsys.readouterr().out
    assert list(json.loads((tmp_path / "o2" / "eval.json").read_text())["not_evaluated"]) == ["toy-broken"]
    assert main(["eval", "configs/reach_mlp_ppo.yaml", "--checkpoint", str(checkpoint), "--suites", "Reach-v9"]) == 2
    assert "unknown env 'Reach-v9'" in capsys.readouterr().err

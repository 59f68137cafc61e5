"""Each config section checks its own fields (``validate(path)`` on its dataclass, ``embodied.config.sections``), as
the policy and algorithm sections do; ``embodied.config.validate`` keeps only checks of fields against each
other's."""

from __future__ import annotations

import dataclasses

import pytest

from embodied.config import ConfigError, load_config
from embodied.config.schema import Config
from embodied.config.runner import FaultsConfig, RunnerConfig
from embodied.config.sections import (ActorConfig, ClusterConfig, EnvConfig, ExperimentConfig, LoggerConfig, Resources,
                                      RolloutConfig, SFTConfig)


def test_every_section_of_the_config_validates_itself():
    cfg = Config(sft=SFTConfig())  # sft: only where a recipe has one
    for f in dataclasses.fields(Config):
        assert callable(getattr(getattr(cfg, f.name), "validate", None)), f.name


@pytest.mark.parametrize("section,path,expected", [
    (ExperimentConfig(seed=-1), "experiment", "experiment.seed: must be in [0, 2**32)"),
    (EnvConfig(id="Reach-v0", num_envs=0, build_retries=-1), "env", "env.num_envs: must be >= 1"),
    (EnvConfig(id="No-such-v0"), "env", "env.id: "),
    (ClusterConfig(torch_threads=0, env_resources=Resources(num_gpus=-1.0)), "cluster",
     "cluster.env_resources.num_gpus: must be a number >= 0"),
    (RolloutConfig(pipeline_stages=0), "rollout", "rollout.pipeline_stages: must be >= 1"),
    (ActorConfig(ema_decay=1.0), "actor", "actor.ema_decay: must be in [0, 1)"),
    (RunnerConfig(faults=FaultsConfig(restart_backoff_s=2.0, restart_backoff_max_s=1.0)), "runner",
     "runner.faults.restart_backoff_max_s: the backoff's cap must be >= its base runner.faults.restart_backoff_s=2"),
    (SFTConfig(features={"imgs": "x"}, dataset=[""]), "sft", "sft.features.imgs: unknown key"),
    (LoggerConfig(backends=["console", "console"]), "logger", "logger.backends: each backend at most once"),
])
def test_a_section_names_its_own_bad_field_by_its_path(section, path, expected):
    problems = section.validate(path)
    assert any(p.startswith(expected) for p in problems), problems
    assert all(p.startswith(path + ".") for p in problems)


def test_the_whole_config_reports_a_section_s_problem_and_one_across_sections():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["sft.epochs=0", "cluster.num_env_workers=64", "env.num_envs=8"])
    assert "sft.epochs: must be >= 1" in str(err.value)  # the section's own
    assert "cluster.num_env_workers: 64 ranks for env.num_envs=8" in str(err.value)  # fields against each other


def test_an_old_recipe_s_restart_fields_load_into_runner_faults_with_a_message(tmp_path):
    recipe = tmp_path / "old.yaml"
    recipe.write_text("runner:\n  iterations: 3\n  max_worker_restarts: 7\n  restart_backoff_s: 0\n")
    with pytest.warns(FutureWarning, match=r"old.yaml: runner.max_worker_restarts: moved to "
                                           r"runner.faults.max_worker_restarts"):
        cfg = load_config(recipe)
    assert (cfg.runner.iterations, cfg.runner.faults.max_worker_restarts, cfg.runner.faults.restart_backoff_s) == \
        (3, 7, 0.0)
    saved = {"runner": {"max_worker_restarts": 2}}  # a checkpoint's config of before: read the same way, quietly
    from embodied.config.loader import saved_form
    assert saved_form(saved)["runner"] == {"faults": {"max_worker_restarts": 2}}

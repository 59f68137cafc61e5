"""Typed experiment configuration: the schema and its YAML loader."""

from __future__ import annotations

from embodied.config.loader import ConfigError, config_from_dict, load_config, to_dict
from embodied.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    ClusterConfig,
    Config,
    EnvConfig,
    EvalEnvConfig,
    ExperimentConfig,
    LoggerConfig,
    RolloutConfig,
    RunnerConfig,
)

__all__ = [
    "ActorConfig", "AlgorithmConfig", "ClusterConfig", "Config", "ConfigError", "EnvConfig", "EvalEnvConfig",
    "ExperimentConfig", "LoggerConfig", "RolloutConfig", "RunnerConfig", "config_from_dict", "load_config",
    "to_dict",
]

"""Typed experiment configuration: the schema and its YAML loader."""

from __future__ import annotations

from embodied.config.algorithm import OffPolicyConfig, OnPolicyConfig, TDConfig
from embodied.config.loader import ConfigError, config_from_dict, load_config, to_dict
from embodied.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    ClusterConfig,
    Config,
    EnvConfig,
    EvalEnvConfig,
    ExperimentConfig,
    ExpertLabels,
    LoggerConfig,
    RolloutConfig,
    RunnerConfig,
    algorithm_config_class,
)

__all__ = [
    "ActorConfig", "AlgorithmConfig", "ClusterConfig", "Config", "ConfigError", "EnvConfig", "EvalEnvConfig",
    "ExperimentConfig", "ExpertLabels", "LoggerConfig", "OffPolicyConfig", "OnPolicyConfig", "RolloutConfig",
    "RunnerConfig", "TDConfig",
    "algorithm_config_class", "config_from_dict", "load_config", "to_dict",
]

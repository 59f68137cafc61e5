"""Simulators as gymnasium environments, and the chunked vector env."""

DEFAULT_ID = "Reach-v0"  # env.id when a config leaves it out: the default recipe's task

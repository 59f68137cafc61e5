"""Policies: one folder a policy (configuration, modeling)."""

DEFAULT_TYPE = "mlp"  # policy.type when a config leaves it out: the default recipe's policy

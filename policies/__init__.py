"""Policies: one folder a policy (configuration, modeling)."""

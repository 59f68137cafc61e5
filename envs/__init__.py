"""Simulators as gymnasium environments, and the chunked vector env."""

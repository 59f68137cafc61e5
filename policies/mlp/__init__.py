"""Gaussian MLP policy emitting action chunks."""

"""Gaussian CNN policy emitting action chunks from camera images (and states)."""

"""Demonstrations: collect them through the env workers, store them, read them back."""

"""Benchmarks of the framework's own paths, behind ``embodied bench`` (see ``embodied.bench.run``)."""

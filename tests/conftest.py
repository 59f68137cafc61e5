"""Shared pytest fixtures: one Ray session for the whole test run."""

from __future__ import annotations

import os

# Set before any test imports wandb or mujoco: no network logging, headless rendering.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("MUJOCO_GL", "egl")
# Tiny VLA backbones (policy.model_path: tiny:NAME) are built once per test run, into a fresh folder
# that Ray workers inherit too, so tests never depend on (or fill) the user's cache.
if "EMBODIED_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["EMBODIED_CACHE"] = tempfile.mkdtemp(prefix="embodied-test-cache-")
    atexit.register(shutil.rmtree, os.environ["EMBODIED_CACHE"], True)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Start Ray once per test session (init costs seconds); shut it down at the end.

    Imports ``ray`` lazily so test runs that need no Ray never pay for it. A Ray session
    started by someone else is reused and left running.
    """
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    if started:
        ray.shutdown()

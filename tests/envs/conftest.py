"""Offscreen rendering for the env tests: MuJoCo picks its GL backend when first imported."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

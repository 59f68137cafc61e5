"""The runner's start-up: what it starts before its checks."""

from __future__ import annotations

import sys

import pytest

import embodied.runner as runner
from embodied.config import ConfigError, load_config


def test_import_in_background_imports_on_a_thread_and_leaves_failures_to_the_real_import(tmp_path, monkeypatch):
    (tmp_path / "embodied_background_probe.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "embodied_background_probe", raising=False)
    thread = runner.import_in_background(("this_module_does_not_exist", "embodied_background_probe"))
    thread.join(timeout=30)
    assert not thread.is_alive() and thread.daemon
    assert "embodied_background_probe" not in sys.modules  # the failed import stopped the list, silently
    thread = runner.import_in_background(("embodied_background_probe",))
    thread.join(timeout=30)
    assert sys.modules["embodied_background_probe"].LOADED


@pytest.mark.parametrize("backend, imports", [("local", [runner.OPTIMIZER_IMPORTS]), ("ray", [])])
def test_a_local_run_imports_what_the_first_optimizer_step_needs_while_the_preflight_runs(monkeypatch, backend,
                                                                                           imports):
    """The actor of a local run lives in the driver, and its first Adam step imports torch._dynamo (~0.9 s of
    CPU): that import starts before the checks, on a thread. On Ray the actor is another process."""
    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(runner, "import_in_background", started.append)

    def checks(cfg) -> None:
        raise ConfigError(f"stop here; imports started: {started}")

    monkeypatch.setattr(runner, "check_before_start", checks)
    with pytest.raises(ConfigError, match="stop here"):
        runner.train(load_config(None, [f"cluster.backend={backend}"]))
    assert started == imports
    assert "torch._dynamo" in runner.OPTIMIZER_IMPORTS

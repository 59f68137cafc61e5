"""Mailbox actors (``embodied.channels.mailbox``): an importable worker class travels by name."""

from __future__ import annotations

import pytest

from tests.toy_torch_worker import TorchWorker


def test_a_mailbox_actor_forwards_calls_and_its_handle_loads_no_worker_module_where_it_arrives(ray_session):
    """An env worker that delivers into a rollout worker holds the rollout worker's handle; loading the rollout
    worker's class there would import torch (seconds a process). The handle arrives; the class's module does not."""
    import ray

    from embodied.channels.mailbox import mailbox_actor
    from embodied.channels.ray_channel import MAILBOX_GROUP

    remote = mailbox_actor(TorchWorker, num_cpus=0)
    heavy = remote.remote(21)
    assert ray.get(heavy.double.remote()) == 42 and ray.get(heavy.peek.remote()) == 21
    assert remote.__ray_metadata__.class_name == "TorchWorker"  # Ray's process title: ray::TorchWorker
    assert getattr(remote.__ray_metadata__.modified_class.peek, "__ray_concurrency_group__", None) == MAILBOX_GROUP

    class Probe:
        def loaded(self, handles: list) -> list[str]:
            import sys

            assert len(handles) == 1
            return sorted(m for m in ("torch", "tests.toy_torch_worker") if m in sys.modules)

    probe = ray.remote(num_cpus=0)(Probe).remote()
    assert ray.get(probe.loaded.remote([heavy])) == []


def test_a_class_is_found_by_its_import_name_or_not_at_all():
    pytest.importorskip("ray")
    from embodied.channels.mailbox import _imported

    assert _imported("tests.toy_torch_worker:TorchWorker") is TorchWorker
    assert _imported("tests.toy_torch_worker:Missing") is None and _imported("no_such_module:X") is None

"""``Backend.release``: one group's workers end, the backend's other groups go on (evals sharing a backend)."""

from __future__ import annotations

import pytest
from tests.toy_workers import Echo

from embodied.backends import LocalBackend, RayBackend
from embodied.config import ClusterConfig
from embodied.config.schema import Resources


def test_a_released_local_group_stops_its_threads_and_the_others_still_answer():
    backend = LocalBackend()
    kept, gone = backend.create(Echo, [(1,)]), backend.create(Echo, [(2,), (3,)])
    assert backend.wait(gone.call("get")) == [2, 3]
    backend.release(gone)
    for thread in gone._threads:
        thread.join(5.0)
        assert not thread._thread.is_alive()
    assert backend.wait(kept.call("get")) == [1] and backend._groups == [kept]
    backend.shutdown()


@pytest.mark.ray
def test_a_released_ray_group_loses_its_processes_and_placement_group_and_the_others_still_answer(ray_session):
    import ray
    from ray.util import placement_group_table

    backend = RayBackend(ClusterConfig(backend="ray"))
    kept = backend.create(Echo, [(1,)])
    gone = backend.create(Echo, [(2,), (3,)], Resources(num_cpus=0.5, group_strategy="pack"))
    assert backend.wait(gone.call("get")) == [2, 3]
    actors, placement = list(gone.actors), gone.placement
    backend.release(gone)
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.get.remote(), timeout=30)
    assert placement_group_table(placement)["state"] == "REMOVED" and backend._placement_groups == []
    assert backend._actors == kept.actors and backend.wait(kept.call("get")) == [1]
    kept.restart(0, (4,))  # a restart after a release is still one the backend's shutdown ends
    assert any(a is kept.actors[0] for a in backend._actors) and backend.wait(kept.call("get")) == [4]
    backend.shutdown()

"""The actor-ranks benchmark runs end to end on a small batch: one rank, then two with ddp and with fsdp."""

from __future__ import annotations

import pytest

from benchmarks.actor_ranks import main


@pytest.mark.slow
def test_actor_ranks_benchmark_times_one_and_two_ranks(ray_session, capsys):
    rows = main(["--quick", "--policy", "mlp"])
    assert [(r["ranks"], r["strategy"]) for r in rows] == [(1, "ddp"), (2, "ddp"), (2, "fsdp")]
    assert all(r["update_s"] > 0 and r["sync_s"] > 0 for r in rows)
    assert "vs 1 rank" in capsys.readouterr().out

"""``embodied bench``'s SAC row: updates/s and the loop's wait shares, at toy size (figures are not asserted)."""

from __future__ import annotations

import math

import pytest

from embodied.bench.run import Report, markdown
from embodied.bench.sac import sac_row, wait_shares


def test_wait_shares_are_the_loops_waits_over_its_wall_time():
    shares = wait_shares(actor_wait_s=1.0, rollout_wait_s=2.5, wall_s=4.0)
    assert shares == {"actor_waits_for_data": 0.25, "rollouts_wait_for_weights": 0.625}


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [True, False])
def test_sac_row_measures_updates_and_waits_on_the_reach_mlp(overlap):
    row = sac_row(updates=3, iterations=2, num_envs=2, chunk_steps=2, overlap=overlap)
    assert row["policy"] == "mlp/tanh_gaussian Reach-v0 256x256"
    assert (row["critics"], row["layernorm"], row["batch_size"], row["overlap"]) == (10, True, 256, overlap)
    assert math.isfinite(row["updates_per_s"]) and row["updates_per_s"] > 0
    assert row["updates_in_loop"] == 2 * 2 * 2  # utd_ratio 1 x 4 transitions x 2 timed iterations
    assert row["rollout_s"] > 0 and row["update_s"] > 0 and row["sync_s"] >= 0
    assert row["actor_wait_s"] >= 0 and row["rollout_wait_s"] >= 0 and row["loop_s"] > 0
    waits = row["actor_waits_for_data"] + row["rollouts_wait_for_weights"]
    if overlap:  # the next epoch runs during the updates: neither waits through the whole of the other
        assert 0 <= waits <= 1.05
    else:  # in turn the actor waits through every sync and epoch, the rollouts through every update
        assert waits == pytest.approx(1.0, abs=0.1)
    table = markdown(Report(sac=[row]))
    assert "## SAC: updates/s and who waits" in table and "| updates_per_s |" in table

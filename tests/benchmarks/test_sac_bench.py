"""``embodied bench``'s SAC row: updates/s and the loop's wait shares, at toy size (figures are not asserted)."""

from __future__ import annotations

import math

import pytest

from embodied.bench.run import Report, markdown
from embodied.bench.sac import sac_row
from embodied.offpolicy_runner import wait_shares


def test_wait_shares_split_the_iteration_between_rollout_and_update_with_sync():
    shares = wait_shares(rollout_s=1.0, update_s=2.5, sync_s=0.5)
    assert shares == {"sac/actor_waits_for_data": 0.25, "sac/rollouts_wait_for_weights": 0.75}


@pytest.mark.slow
def test_sac_row_measures_updates_and_waits_on_the_reach_mlp():
    row = sac_row(updates=3, iterations=2, num_envs=2, chunk_steps=2)
    assert row["policy"] == "mlp_sac Reach-v0 256x256"
    assert (row["critics"], row["layernorm"], row["batch_size"]) == (10, True, 256)
    assert math.isfinite(row["updates_per_s"]) and row["updates_per_s"] > 0
    assert row["updates_in_loop"] == 2 * 2 * 2  # utd_ratio 1 x 4 transitions x 2 timed iterations
    assert row["rollout_s"] > 0 and row["update_s"] > 0 and row["sync_s"] >= 0
    assert row["actor_waits_for_data"] + row["rollouts_wait_for_weights"] == pytest.approx(1.0, abs=2e-3)
    table = markdown(Report(sac=[row]))
    assert "## SAC: updates/s and who waits" in table and "| updates_per_s |" in table

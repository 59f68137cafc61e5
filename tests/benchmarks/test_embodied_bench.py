"""``embodied bench --quick`` runs every section end to end and writes what it says (figures are not asserted)."""

from __future__ import annotations

import json
import math

import pytest

from embodied.cli import main


@pytest.mark.slow
@pytest.mark.ray
def test_quick_bench_writes_a_table_json_and_png_of_every_section(tmp_path, capsys, ray_session):
    assert main(["bench", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    paths = {(r["path"], r["obs"]) for r in report["throughput"]}
    for obs in ("state", "rgb"):
        assert ("raw gymnasium SyncVectorEnv", obs) in paths
        assert ("framework local E=1", obs) in paths and ("framework ray E=1", obs) in paths
    assert ("raw gymnasium AsyncVectorEnv", "rgb") in paths
    assert ("native physics limit", "state") in paths  # beside raw SyncVectorEnv, in the same run
    assert all(r["vs_raw_physics"] > 0 for r in report["throughput"] if r["obs"] == "state")
    assert all(r["vs_raw_physics"] is None for r in report["throughput"] if r["obs"] == "rgb")
    for row in report["throughput"]:
        assert row["env_steps"] > 0 and math.isfinite(row["steps_per_s"]) and row["steps_per_s"] > 0
        assert row["memory_mib"] > 0
    (pipe,) = report["pipelining"]  # the tiny VLA row only in the full run
    assert pipe["policy"] == "CNN"
    assert pipe["steps_per_s_1_stage"] > 0 and pipe["steps_per_s_2_stages"] > 0 and pipe["ideal_speedup"] >= 1
    (sync,) = report["weight_sync"]
    assert sync["bytes_sent"] > 0 and 0 < sync["share_of_iteration"] < 1
    (sac,) = report["sac"]
    assert sac["critics"] == 10 and sac["batch_size"] == 256 and sac["updates_per_s"] > 0
    assert 0 <= sac["actor_waits_for_data"] <= 1 and 0 <= sac["rollouts_wait_for_weights"] <= 1
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "## Rollout throughput" in printed and "## Weight sync (Ray)" in printed and "## SAC:" in printed
    assert printed.count("\n") > 15 and (tmp_path / "bench.md").read_text().startswith("# embodied bench (quick")

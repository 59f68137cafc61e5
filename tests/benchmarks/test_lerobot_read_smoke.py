"""``benchmarks/lerobot_read.py`` runs end to end at toy sizes (figures are not asserted, the cache bound is)."""

from __future__ import annotations

import math

from benchmarks.lerobot_read import main


def test_the_lerobot_read_benchmark_writes_reads_and_trains_within_the_cache(capsys):
    figures = main(["--episodes", "2", "--frames", "12", "--size", "48", "--cache-mb", "0.02", "--batch-size", "8",
                    "--train"])
    for key in ("random_fps", "sequential_fps", "train_fps", "rss_read_mib", "rss_train_mib"):
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert figures["frames"] == 24 and figures["decoded_mib"] > figures["cache_mib"] >= figures["cache_peak_mib"] > 0
    out = capsys.readouterr().out
    assert "random (SFT's shuffled read)" in out and "peak RSS" in out and "frame cache 0.02 MiB" in out

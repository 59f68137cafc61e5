"""The soak benchmark runs end to end for a few seconds: forced faults are restarts, memory is reported."""

from __future__ import annotations

import json
import signal
import threading
import time

from benchmarks.soak import drift_report, main, stop_after_running


def test_soak_forces_restarts_and_reports_memory_per_process(tmp_path, capsys):
    figures = main(["configs/reach_mlp_ppo.yaml", "--minutes", "0.15", "--restart-every-s", "2", "--warmup", "0",
                    "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2", "runner.eval_every=0",
                    "rollout.chunk_steps=4", "env.preflight=false", "logger.backends=[console]",
                    "logger.progress_bar=false", f"experiment.output_dir={tmp_path}", "--settle-min", "0"])
    assert figures["restarts"] >= 1 and figures["iterations"] >= 2
    assert set(figures["rss"]) == {"driver"}  # the local backend: workers are threads of the driver
    out = capsys.readouterr().out
    assert "env-worker restarts survived" in out and "slope MiB/h" in out
    assert "growth of each process" in out and "sys/rss_mib/driver" in figures["drift"]
    assert "env_steps_per_s" in figures["drift"]
    assert next(tmp_path.glob("*/soak.png")).stat().st_size > 10_000  # the plot was drawn


def test_drift_report_reads_growth_after_the_settle_mark_and_rate_drift(tmp_path):
    rows = [{"time": 60.0 * m, "sys/rss_mib/env0": 1000.0 if m < 10 else 500.0 + m, "env_steps_per_s": 100.0 - m}
            for m in range(0, 41)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    report = drift_report(tmp_path, settle_s=600)
    assert report["sys/rss_mib/env0"] == {"first": 510.0, "last": 540.0, "growth_pct": 100 * (540 / 510 - 1)}
    rate = report["env_steps_per_s"]  # minutes 10-20 against 30-40
    assert rate["first"] == sum(100.0 - m for m in range(10, 21)) / 11
    assert rate["last"] == sum(100.0 - m for m in range(30, 41)) / 11 and rate["drift_pct"] < 0


def test_the_clock_starts_at_the_first_iteration_and_a_finished_run_is_not_signalled(tmp_path):
    got: list[float] = []
    previous = signal.signal(signal.SIGTERM, lambda *_: got.append(time.monotonic()))
    try:
        done = threading.Event()
        clock = threading.Thread(target=stop_after_running, args=(tmp_path, "run-", 0.3, done))
        clock.start()
        time.sleep(0.5)  # start-up: no iteration logged yet, so no signal however long it takes
        assert not got
        (tmp_path / "run-1").mkdir()
        (tmp_path / "run-1" / "metrics.jsonl").write_text('{"time": 0}\n')
        logged = time.monotonic()
        clock.join(timeout=5)
        assert len(got) == 1 and got[0] - logged >= 0.3

        quiet = threading.Event()
        clock = threading.Thread(target=stop_after_running, args=(tmp_path / "other", "run-", 0.3, quiet))
        clock.start()
        quiet.set()  # the run ended on its own before logging
        clock.join(timeout=5)
        assert not clock.is_alive() and len(got) == 1
    finally:
        signal.signal(signal.SIGTERM, previous)

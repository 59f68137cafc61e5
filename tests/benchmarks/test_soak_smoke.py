"""The soak benchmark runs end to end for a few seconds: forced faults are restarts, memory is reported."""

from __future__ import annotations

from benchmarks.soak import main


def test_soak_forces_restarts_and_reports_memory_per_process(tmp_path, capsys):
    figures = main(["configs/reach_mlp_ppo.yaml", "--minutes", "0.15", "--restart-every-s", "2", "--warmup", "0",
                    "env.num_envs=4", "eval_env.num_envs=2", "runner.eval_episodes=2", "runner.eval_every=0",
                    "rollout.chunk_steps=4", "env.preflight=false", "logger.backends=[console]",
                    "logger.progress_bar=false", f"experiment.output_dir={tmp_path}"])
    assert figures["restarts"] >= 1 and figures["iterations"] >= 2
    assert set(figures["rss"]) == {"driver"}  # the local backend: workers are threads of the driver
    out = capsys.readouterr().out
    assert "env-worker restarts survived" in out and "slope MiB/h" in out

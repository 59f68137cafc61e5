"""Learning curves: metrics.jsonl -> learning_curves.png, from the library and from `embodied plot`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from embodied.cli import main
from embodied.logging.plot import PLOT_FILE, plot_run, read_metrics, series


def write_metrics(run_dir, iterations: int = 10, eval_every: int = 5) -> None:
    rows = []
    for it in range(1, iterations + 1):
        row = {"step": it, "time": 1000.0 + 30 * it, "env_steps": 1000 * it, "env/success_rate": it / iterations, "env/return": -10 + it,
               "env/episode_len": 50 - it, "train/policy_loss": -0.01 * it, "train/value_loss": 10 / it,
               "env_steps_per_s": 5000.0 + it, "env/episodes": 3.0}
        if it % eval_every == 0:
            row |= {"eval/success_rate": it / iterations, "eval/success_ci_low": 0.1, "eval/success_ci_high": 0.95,
                    "eval/return": -5 + it, "eval/episode_len": 40 - it}
        rows.append(row)
    rows[0]["env/success_rate"] = math.nan  # no episode finished in the first iteration
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_run_draws_a_png_in_the_run_dir(tmp_path):
    write_metrics(tmp_path)
    path = plot_run(tmp_path)
    assert path == tmp_path / PLOT_FILE
    image = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (800, 1500, 3)
    assert image.std() > 10  # curves, not a blank canvas
    assert not list(tmp_path.glob("*.tmp"))


def test_series_skips_missing_and_nan_values(tmp_path):
    write_metrics(tmp_path)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert series(rows, "eval/success_rate") == ([5000, 10000], [0.5, 1.0])
    assert series(rows, "env/success_rate")[0][0] == 2000


def test_a_torn_last_line_is_skipped(tmp_path):
    write_metrics(tmp_path, iterations=3)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "env_st')  # a crash mid-write
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 3
    assert plot_run(tmp_path).exists()


def test_a_dir_without_metrics_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl does not exist"):
        plot_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="no metrics"):
        plot_run(tmp_path)


def test_embodied_plot_command(tmp_path, capsys):
    write_metrics(tmp_path)
    assert main(["plot", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / PLOT_FILE)
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_plotting_leaves_the_matplotlib_backend_alone(tmp_path):
    import matplotlib

    before = matplotlib.get_backend()
    write_metrics(tmp_path)
    plot_run(tmp_path)
    assert matplotlib.get_backend() == before


def test_embodied_plot_of_several_runs_compares_their_evals(tmp_path, capsys):
    a, b, bare = tmp_path / "ppo", tmp_path / "grpo", tmp_path / "no_evals"
    for run, every in ((a, 5), (b, 2), (bare, 100)):
        run.mkdir()
        write_metrics(run, eval_every=every)
    out = tmp_path / "figs" / "compare.png"
    out.parent.mkdir()
    baseline = tmp_path / "eval.json"
    baseline.write_text(json.dumps({"checkpoint": "runs/sft-1/checkpoints/iter_000010", "success_rate": 0.3,
                                    "return_mean": -7.0}))
    assert main(["plot", str(a), str(b), "--out", str(out), "--baseline", str(baseline)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    image = np.asarray(Image.open(out).convert("RGB"))
    assert image.shape == (450, 1700, 3) and image.std() > 10
    assert main(["plot", str(a), str(bare), "--out", str(tmp_path / "x.png")]) == 2
    assert "no_evals/metrics.jsonl holds no eval rows" in capsys.readouterr().err
    assert main(["plot", str(a), "--baseline", str(tmp_path / "ppo" / "metrics.jsonl"), "--out", str(tmp_path / "x.png")]) == 2
    assert "metrics.jsonl: not an eval.json of `embodied eval`" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_the_comparison_has_a_wall_clock_axis_from_when_each_run_began(tmp_path):
    """Minutes since the run dir was made (its config.yaml), so runs of different speeds share one time axis."""
    import os

    write_metrics(tmp_path)
    (tmp_path / "config.yaml").write_text("experiment: {}\n")
    os.utime(tmp_path / "config.yaml", (1000.0, 1000.0))
    from embodied.logging.plot import run_start

    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert run_start(tmp_path, rows) == 1000.0
    minutes, values = series(rows, "eval/success_rate", run_start(tmp_path, rows))
    assert minutes == [2.5, 5.0] and values == [0.5, 1.0]  # iterations 5 and 10, 30 s each
    assert series([{"eval/success_rate": 1.0}], "eval/success_rate", 0.0) == ([], [])  # no time: left out
    os.utime(tmp_path / "config.yaml", (5000.0, 5000.0))  # a resume writes config.yaml again, later
    first = rows[0]["time"] - rows[0].get("time/iteration", 0.0)
    assert run_start(tmp_path, rows) == first <= 1030.0  # the first start is kept: no eval before minute 0


def test_the_loss_panels_draw_any_learner_s_losses_by_their_names():
    """PPO's train/, SAC's sac/, DAgger's dagger/, SFT's sft/ losses: a plug-in's metrics are drawn by their names,
    not by a list of algorithms; PPO's total train/loss is neither a policy nor a value loss."""
    from embodied.logging.plot import PANELS, panel_keys

    policy, value = (next(p for p in PANELS if p.title == title) for title in ("policy loss", "value loss"))
    rows = [{"train/policy_loss": 1.0, "train/value_loss": 2.0, "train/loss": 3.0, "sac/policy_loss": 0.5,
             "sac/q_loss": 0.7, "dagger/policy_loss": 0.1, "eval/task/policy_loss": 9.0},
            {"sft/train_loss": 0.2, "sft/val_loss": 0.3}]
    assert panel_keys(rows, policy) == ["dagger/policy_loss", "sac/policy_loss", "train/policy_loss",
                                        "sft/train_loss", "sft/val_loss"]
    assert panel_keys(rows, value) == ["train/value_loss", "sac/q_loss"]

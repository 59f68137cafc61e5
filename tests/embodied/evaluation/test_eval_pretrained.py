"""``embodied eval`` without ``--checkpoint``: the policy as the config builds it (a downloaded π0 / π0.5 folder in
``policy.model_path``), evaluated before any training, one suite or several; ``--out`` is then required."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied.cli import main

ROOT = Path(__file__).resolve().parents[3]
REACH = str(ROOT / "configs" / "reach_mlp_ppo.yaml")
QUIET = ["logger.progress_bar=false", "eval_env.num_envs=3"]


def test_eval_without_a_checkpoint_needs_out_and_evaluates_the_configured_policy(tmp_path, capsys):
    assert main(["eval", REACH, "--episodes", "3", *QUIET]) == 2
    err = capsys.readouterr().err
    assert "without --checkpoint" in err and "give --out" in err
    first, again = tmp_path / "a", tmp_path / "b"
    for out in (first, again):
        assert main(["eval", REACH, "--episodes", "3", "--out", str(out), *QUIET]) == 0
    assert "no checkpoint: policy.type=mlp as initialised" in capsys.readouterr().out
    report = json.loads((first / "eval.json").read_text())
    assert report["checkpoint"] == "no checkpoint: policy.type=mlp as initialised" and report["iteration"] == 0
    assert len(report["episodes"]) == 3
    assert report["episodes"] == json.loads((again / "eval.json").read_text())["episodes"]  # same seeds and policy
    suites = tmp_path / "suites"
    assert main(["eval", REACH, "--suites", "Reach-v0", "--episodes", "2", "--out", str(suites), *QUIET]) == 0
    combined = json.loads((suites / "eval.json").read_text())
    assert combined["checkpoint"].startswith("no checkpoint") and (suites / "suites.png").is_file()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:policy.type=pi05.*no normalization statistics")
def test_a_saved_pi05_folder_is_evaluated_as_it_is(tmp_path, capsys):
    folder = tmp_path / "pi05"
    assert main(["make-tiny-vla", str(folder), "--backbone", "pi05-tiny"]) == 0
    recipe = str(ROOT / "configs" / "pick_color_pi05tiny_ppo.yaml")
    args = [f"policy.model_path={folder}", "policy.flow_steps=3", "policy.max_instruction_tokens=24",
            "eval_env.num_envs=2", "logger.progress_bar=false", "--episodes", "2"]
    for out in ("a", "b"):
        assert main(["eval", recipe, *args, "--out", str(tmp_path / out)]) == 0
    reports = [json.loads((tmp_path / out / "eval.json").read_text()) for out in ("a", "b")]
    assert reports[0]["checkpoint"] == f"no checkpoint: policy.type=pi05 from {folder}"
    assert reports[0]["episodes"] == reports[1]["episodes"]  # the folder's weights, greedy, fixed seeds

"""``embodied config show``: every field, its value, where it came from and its doc; a run's start line prints what
differs from the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from embodied.cli import main
from embodied.config import load_config
from embodied.config.schema import SFTConfig
from embodied.config.show import differences, field_docs, rows

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "configs" / "reach_mlp_ppo.yaml"


def test_each_field_says_where_its_value_came_from():
    by_path = {r.path: r for r in rows(RECIPE, ["algorithm.lr=0.001", "env.kwargs.reward_type=dense"])}
    assert by_path["algorithm.lr"].value == 0.001 and by_path["algorithm.lr"].source == "override"
    assert by_path["env.kwargs"].source == "override"
    assert by_path["policy.hidden_sizes"].value == [64, 64] and by_path["policy.hidden_sizes"].source == "recipe"
    assert by_path["experiment.output_dir"].source == "default"
    assert by_path["algorithm.gamma"].doc and by_path["cluster.env_resources.num_cpus"].source == "default"


def test_docs_come_from_the_comment_on_the_line_or_just_above_it():
    docs = field_docs(SFTConfig)
    assert docs["epochs"] == "passes over the training episodes"
    assert docs["features"].startswith("LeRobot datasets: our key")  # comment lines above the field


def test_the_show_command_prints_every_section_and_refuses_a_bad_override(capsys):
    assert main(["config", "show", str(RECIPE), "algorithm.lr=0.001"]) == 0
    out = capsys.readouterr().out
    for section in ("experiment:", "cluster:", "env:", "policy:", "algorithm:", "runner:", "sft:"):
        assert f"\n{section}" in f"\n{out}"
    assert "  lr = 0.001  [override]" in out
    assert main(["config", "show", str(RECIPE), "actor.nope=1"]) == 2
    assert "actor.nope" in capsys.readouterr().err


def test_differences_name_only_what_the_recipe_changed():
    got = differences(load_config(RECIPE, ["algorithm.lr=0.001"]))
    assert "algorithm.lr=0.001" in got and "policy.hidden_sizes=[64, 64]" in got
    assert not any(g.startswith(("experiment.output_dir=", "cluster.")) for g in got)
    assert differences(load_config(None)) == []


@pytest.mark.parametrize("name", ["sac", "crossq", "dagger"])
def test_an_algorithm_s_own_defaults_are_not_differences(name):
    assert not [d for d in differences(load_config(None, [f"algorithm.name={name}", "env.vectorization=per_env"]))
                if d.startswith("algorithm.") and not d.startswith("algorithm.name=")]

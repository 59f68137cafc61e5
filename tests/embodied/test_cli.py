"""The ``embodied`` command line: listing, and config errors as exit code 2 before anything runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodied.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_list_envs(capsys):
    assert main(["list", "envs"]) == 0
    out = capsys.readouterr().out
    assert "Reach-v0" in out and "embodied.envs.reach:ReachEnv" in out
    reach = next(line for line in out.splitlines() if line.startswith("Reach-v0"))
    assert "state | rgb | state+rgb" in reach and "Box(4) in [-1, 1]" in reach


def test_env_catalog_describes_modes_and_names_what_is_unavailable():
    from embodied.env_runtime.catalog import describe_env
    from embodied.core.registry import ENVS

    ENVS.register("OnlyState-v0", "tests.toy_envs:CountingEnv", overwrite=True)  # accepts any obs_mode
    assert describe_env("OnlyState-v0").action_space == "Box(2) in [-10, 10]"
    ENVS.register("Missing-v0", "no_such_pkg.mod:Env", overwrite=True)
    missing = describe_env("Missing-v0")
    assert missing.obs_modes == [] and "unavailable" in missing.error and "no_such_pkg" in missing.error
    batched = describe_env("tests.toy_batched:PointMassBatch")
    assert batched.obs_modes and batched.action_space.startswith("Box(2)")


def test_list_policies(capsys):
    assert main(["list", "policies"]) == 0
    assert "mlp" in capsys.readouterr().out


def test_list_algorithms_names_each_config_class(capsys):
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    assert "embodied.algorithms.ppo_config:PPOConfig" in out and "embodied.algorithms.sac_config:SACConfig" in out


def test_missing_config_file_exits_2_with_the_error_on_stderr(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "configs/missing.yaml"]) == 2
    captured = capsys.readouterr()
    assert "configs/missing.yaml" in captured.err and "does not exist" in captured.err
    assert captured.err.startswith("error:")
    assert captured.out == ""


def test_bad_override_exits_2_and_names_the_field(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "configs/reach_mlp_ppo.yaml", "env.num_env=4"]) == 2
    err = capsys.readouterr().err
    assert "env.num_env" in err and "did you mean 'num_envs'" in err


def test_malformed_override_exits_2(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "configs/reach_mlp_ppo.yaml", "policy.action_chunk"]) == 2
    assert "section.field=value" in capsys.readouterr().err


def test_invalid_value_exits_2_and_names_the_field(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "configs/reach_mlp_ppo.yaml", "policy.action_chunk=0", "env.id=Reach-v9"]) == 2
    err = capsys.readouterr().err
    assert "policy.action_chunk" in err and "env.id" in err and "Reach-v0" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["list", "robots"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def console_script() -> str:
    here = Path(sys.executable).parent / "embodied"
    found = str(here) if here.exists() else shutil.which("embodied")
    if found is None:
        pytest.skip("the 'embodied' console script is not installed")
    return found


def test_console_script_lists_policies():
    out = subprocess.run([console_script(), "list", "policies"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "mlp" in out.stdout and "embodied.policies.mlp.configuration:MLPConfig" in out.stdout


def test_console_script_reports_config_errors_with_exit_code_2():
    out = subprocess.run([console_script(), "train", "configs/missing.yaml"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2
    assert "configs/missing.yaml" in out.stderr


def test_make_tiny_vla_writes_a_folder_transformers_reads(tmp_path, capsys):
    from transformers import AutoConfig

    out = tmp_path / "tiny"
    assert main(["make-tiny-vla", str(out), "--backbone", "qwen2_5_vl-tiny"]) == 0
    printed = capsys.readouterr().out
    assert "Qwen2_5_VLForConditionalGeneration" in printed and "M parameters" in printed
    assert AutoConfig.from_pretrained(out).model_type == "qwen2_5_vl"
    assert (out / "tokenizer.json").is_file()
    assert main(["make-tiny-vla", str(out)]) == 2  # never overwrites
    assert "not empty" in capsys.readouterr().err
    assert main(["make-tiny-vla", str(tmp_path / "x"), "--backbone", "gpt-5"]) == 2
    err = capsys.readouterr().err  # every tiny model a registered policy offers (PolicyConfig.make_tiny)
    assert all(name in err for name in ("smolvlm-tiny", "qwen2_5_vl-tiny", "paligemma-tiny", "pi0-tiny", "pi05-tiny"))


def test_make_tiny_vla_builds_pi0_through_the_policy_registry(tmp_path, capsys):
    from transformers import PI0Config

    assert main(["make-tiny-vla", str(tmp_path / "pi0"), "--backbone", "pi0-tiny"]) == 0
    assert "PI0ForConditionalGeneration" in capsys.readouterr().out
    assert PI0Config.from_pretrained(tmp_path / "pi0").chunk_size > 0


def test_the_cli_names_no_model():
    source = (Path(__file__).resolve().parents[2] / "embodied" / "cli.py").read_text()
    named = [f"embodied.policies.{name}" for name in ("pi0", "pi05", "vla")] + ["TINY_BACKBONES"]
    assert not any(word in source for word in named)


def test_list_says_what_each_entry_is_from_its_docstring(capsys):
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    dagger = next(line for line in out.splitlines() if line.startswith("dagger"))
    assert "(Ross et al. 2011): the policy acts" in dagger and "dagger_config:DAggerConfig" in dagger
    assert main(["list", "policies"]) == 0
    mlp = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("mlp "))
    assert "A Gaussian MLP over the state vector" in mlp


def test_list_envs_groups_ids_by_family(capsys):
    from embodied.core.registry import ENVS

    ENVS.register("MyToy-v0", "tests.toy_envs:CountingEnv", overwrite=True)
    assert main(["list", "envs"]) == 0
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("== ")]
    assert headers[0] == "== built-in MuJoCo tasks" and "== plug-ins (your packages)" in headers
    toy = next(line for line in out.splitlines() if line.startswith("MyToy-v0"))
    assert "State = [step count, episode index, first reset seed]" in toy
    assert out.index("== plug-ins (your packages)") < out.index("MyToy-v0")


def test_a_summary_is_the_docstrings_first_sentence():
    from embodied.env_runtime.catalog import summary

    class Documented:
        """Does a thing (Someone et al. 2020), e.g. well.

        More."""

    class Plain:
        pass

    assert summary(Documented) == "Does a thing (Someone et al. 2020), e.g. well"
    assert summary(Plain) == ""


def test_a_run_without_a_final_eval_says_so_rather_than_nan_over_0_episodes(capsys, tmp_path):
    from embodied.cli import _print_result

    _print_result({"eval/success_rate": 0.5, "eval/return": 2.0, "eval/episodes": 4}, tmp_path, tmp_path / "ck")
    _print_result({}, tmp_path, None)  # stopped by SIGTERM before its eval
    first, _, _, stopped, _, _ = capsys.readouterr().out.splitlines()
    assert first == "final eval: success_rate=0.500 return=2.000 over 4 episodes"
    assert stopped == "final eval: none (the run ended without one)" and "nan" not in stopped

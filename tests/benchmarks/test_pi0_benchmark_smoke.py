"""The π0 throughput benchmark runs end to end at toy batches (no timing assertions)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.pi0_throughput import main


@pytest.mark.filterwarnings("ignore:policy.type=pi0")
def test_quick_run_prints_act_evaluate_and_ppo_rows(capsys):
    threads = torch.get_num_threads()
    try:
        result = main(["--repeats", "1", "--threads", "1", "--act-batches", "2", "--ppo-batches", "2"])
    finally:
        torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert "PI0Policy" in text and "sample_actions" in text and "PPO step" in text
    assert [r[0] for r in result["act"]] == [2] and [r[0] for r in result["ppo"]] == [2]
    assert all(math.isfinite(v) and v > 0 for row in result["act"] + result["evaluate"] for v in row[1:])
    assert result["ppo"][0][2] < 1e-4  # evaluate replays act: the first ratio is 1


@pytest.mark.filterwarnings("ignore:policy.type=pi0")
def test_the_gpu_benchmark_runs_its_code_path_on_a_cpu_at_tiny_size(tmp_path, capsys):
    """``benchmarks/pi0_gpu.py`` builds a config-only folder, random weights on the device, LoRA, and times act and a
    PPO minibatch; at tiny size on a CPU the same path runs (its figures came from a GPU)."""
    import embodied.policies.pi0.modeling as pi0_modeling
    from benchmarks.pi0_gpu import main as gpu_main
    from embodied.policies.pi0.pretrained import load_pi0

    result = gpu_main(["--size", "tiny", "--device", "cpu", "--dtype", "float32", "--act-batches", "2", "--ppo-batches",
                       "2", "--repeats", "1", "--folder", str(tmp_path / "pi0"), "--json", str(tmp_path / "out.json")])
    assert "LoRA r=16" in result["describe"] and result["trainable"] > 0
    assert [r["batch"] for r in result["act"]] == [2] and result["act"][0]["chunks_per_s"] > 0
    assert result["ppo"][0]["first_ratio_error"] < 1e-4 and (tmp_path / "out.json").is_file()
    assert (tmp_path / "pi0" / "config.json").is_file() and not list((tmp_path / "pi0").glob("*.safetensors"))
    assert pi0_modeling.load_pi0 is load_pi0  # the random-weight builder was for that run only


@pytest.mark.filterwarnings("ignore:policy.type=pi05")
def test_the_gpu_benchmark_runs_pi05_through_the_same_path(tmp_path):
    """``--model pi05``: a π0.5 config-only folder, random weights, ``PI05Policy``; the loop still matches
    ``sample_actions`` closely enough that evaluate replays act (first ratio 1)."""
    from benchmarks.pi0_gpu import main as gpu_main
    from embodied.policies.pi05.modeling import PI05Policy
    from embodied.policies.pi05.pretrained import load_pi05

    result = gpu_main(["--model", "pi05", "--size", "tiny", "--device", "cpu", "--dtype", "float32", "--act-batches",
                       "2", "--ppo-batches", "2", "--repeats", "1", "--folder", str(tmp_path / "pi05")])
    assert result["model"] == "pi05" and "PI05Policy" in result["describe"] and "π0.5" in result["describe"]
    assert result["act"][0]["chunks_per_s"] > 0 and result["ppo"][0]["first_ratio_error"] < 1e-4
    assert json.loads((tmp_path / "pi05" / "config.json").read_text())["model_type"] == "pi05"
    assert PI05Policy.load_model is load_pi05  # the random-weight builder was for that run only

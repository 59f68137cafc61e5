"""The VLA throughput benchmark runs end to end at toy sizes (no timing assertions)."""

from __future__ import annotations

import math

import torch
from benchmarks.vla_throughput import HEADS, main, make_obs, make_policy, parse_args, raw_pass


def test_quick_run_prints_every_head_and_writes_the_png(tmp_path, capsys):
    out = tmp_path / "plots" / "vla.png"  # a folder that does not exist yet
    threads = torch.get_num_threads()
    try:
        result = main(["--quick", "--threads", "1", "--device", "cpu", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert "act chunks/s" in text and "raw chunks/s" in text and "act/raw" in text and "PPO minibatch step" in text
    assert "Idefics3ForConditionalGeneration" in text and "parameters" in text
    rows = [line.split() for line in text.splitlines()]
    for head in HEADS:
        assert any(r[:2] == [head, "2"] and len(r) >= 5 for r in rows), head  # act row at batch 2
    assert [r.head for r in result["act"]] == list(HEADS) and [s.head for s in result["ppo_step"]] == list(HEADS)
    for r in result["act"]:
        assert math.isfinite(r.ratio) and r.act_rate > 0 and r.raw_rate > 0
    assert all(s.step_s > 0 and s.evaluate_s > 0 for s in result["ppo_step"])
    assert all(0 <= s.ratio_error < 1e-4 for s in result["ppo_step"])  # evaluate replays act on the CPU
    assert "max|ratio-1|" in text
    assert "flow expert: width" in text and "evaluate ms" in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_raw_passes_reproduce_the_policys_greedy_actions():
    """The raw reference does the head's work on the policy's inputs: same greedy bins as act()."""
    args = parse_args(["--device", "cpu"])
    obs = make_obs(3, args.image_size, 0)
    for head in ("tokens", "autoregressive"):
        policy = make_policy(args, "tiny:smolvlm-tiny", head)
        raw, _ = raw_pass(policy, head, obs)
        with torch.no_grad():
            bins = policy.action_tokenizer.encode(policy.act(obs, deterministic=True).actions).reshape(3, -1)
            got = raw()
        n_bins, first = policy.action_tokenizer.n_bins, policy.action_tokenizer.first_token_id
        raw_bins = got[..., -n_bins:].argmax(-1) if head == "tokens" else got - first
        assert torch.equal(bins, raw_bins), head

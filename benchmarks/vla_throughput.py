"""VLA throughput: ``VLAPolicy.act()`` beside the raw transformers forward pass, and one PPO step.

    python benchmarks/vla_throughput.py                          # tiny SmolVLM, cpu, batches 8,32,128
    python benchmarks/vla_throughput.py --quick                  # batch 2, one repeat: a smoke run
    python benchmarks/vla_throughput.py --backbone qwen2_5_vl-tiny --repeats 3
    python benchmarks/vla_throughput.py --scale medium --device cuda --dtype bfloat16   # ~119M Idefics3
    python benchmarks/vla_throughput.py --model-path ~/models/SmolVLM-256M-Instruct      # any save_pretrained folder
    python benchmarks/vla_throughput.py --threads 1              # a busy shared CPU: no thread contention
    python benchmarks/vla_throughput.py --heads tokens,flow-k10,flow-k4,flow-k4-noise    # the flow head
    python benchmarks/vla_throughput.py --scale large --device cuda --dtype bfloat16 --heads tokens,flow-k10,flow-k4

The table goes to stdout, the plot to ``--out`` (default ``runs/benchmarks/vla_throughput.png``). ``policies/``
is imported as ``embodied.policies``, so the repo must be installed; on a GPU machine that has torch and
transformers but no network, ``ln -s ../policies embodied/policies; ln -s ../envs embodied/envs`` in a
checkout does instead (how the H100 figures in ``docs/results/flow_head.md`` were taken).

For each action head (tokens, autoregressive, gaussian; ``flow-kK`` is the flow head with ``K``
Euler steps and Flow-SDE log-probs, ``flow-kK-noise`` with Flow-Noise) and batch size, on random uint8 64x64 main
and wrist images with built-in instructions, all under ``torch.no_grad``:

- "act" times ``policy.act(obs)``: prompt ids, uint8 -> pixel values on the device, the backbone,
  the head (sampling), the value head and the copy of the results back to the CPU.
- "raw" times the backbone alone through transformers, on the inputs the policy's processor builds
  (``processor.prompts``, ``processor.pixel_inputs``), already on the device:
  tokens / gaussian: ``backbone(**inputs, use_cache=False, logits_to_keep=k)`` over the prompt plus the
  C*A placeholder tokens (qwen: with ``image_grid_thw`` and ``mm_token_type_ids``), k = C*A for
  tokens (its logits) and 1 for gaussian (it reads hidden states, no logits; 0 would mean all);
  autoregressive: the prompt forward filling the KV cache plus C*A-1 cached one-token steps, each
  ``logits_to_keep=1``, greedy over the action-bin ids (the same passes act() makes; no ``generate``).
  flow: one forward over the prompt returning every layer's hidden states (the prefix the expert
  reads), so act/raw is the share of act() the expert's K steps and the rest leave.
  The raw LM head scores the whole vocabulary at kept positions; the policy scores only action bins.
- "act/raw" is act throughput over raw throughput; the project's goal is >= 0.9.

Then one PPO minibatch step per head, as ``PPO._step`` (embodied/algorithms/ppo.py) does it: ``policy.evaluate`` on the
``forward_inputs`` of an act() batch, ``ppo_loss``, backward, grad-norm clip and an Adam step over
the trainable parameters; and ``policy.evaluate`` alone under ``no_grad`` (what recomputing
log-probs costs: one expert step for Flow-SDE, K for Flow-Noise), and how far the first PPO ratio
is from 1 (``max|ratio-1|``: ``evaluate`` against ``act``'s log-probs, before any update). Times are medians of ``--repeats`` runs after one warm-up run, with
``torch.cuda.synchronize()`` around each on CUDA. ``--scale medium`` builds (into a temporary
folder, with ``policies/vla/tiny.py``'s SmolVLM config scaled up) an Idefics3 model of about 119M
parameters, ``--scale large`` one of about 400M (SmolLM2-360M's text widths) with a 1024-wide,
8-layer flow expert, so a GPU run of a realistic size needs no download.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

import torch  # noqa: E402

from benchmarks.vla_bench.models import DEFAULT_HEADS, HEADS, build_medium_smolvlm, make_obs, make_policy  # noqa: E402
from benchmarks.vla_bench.raw import raw_pass  # noqa: E402
from benchmarks.vla_bench.report import ActRow, StepRow, header, plot, table  # noqa: E402
from embodied.algorithms import ppo_loss  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "runs" / "benchmarks" / "vla_throughput.png"


# -- timing ------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds of one call of ``fn``, synchronized on CUDA."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def medians(fns: dict[str, Callable[[], Any]], device: torch.device, repeats: int) -> dict[str, float]:
    """One warm-up call of each, then ``repeats`` interleaved timed calls; the median of each."""
    for fn in fns.values():
        timed(fn, device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn, device))
    return {name: statistics.median(t) for name, t in times.items()}


# -- the measurements --------------------------------------------------------------------------


def bench_act(policy: Any, head: str, batches: list[int], args: argparse.Namespace) -> list[ActRow]:
    rows = []
    for batch in batches:
        obs = make_obs(batch, args.image_size, args.seed)
        raw, reference = raw_pass(policy, head, obs)
        with torch.no_grad():
            t = medians({"act": lambda: policy.act(obs), "raw": raw}, policy.device_, args.repeats)
        rows.append(ActRow(head, batch, t["act"], t["raw"], reference))
        print(f"  {head:15s} batch {batch:4d}: act {rows[-1].act_rate:9.1f}  raw {rows[-1].raw_rate:9.1f} chunks/s",
              flush=True)
    return rows


def bench_ppo_step(policy: Any, head: str, batch: int, args: argparse.Namespace) -> StepRow:
    """``PPO._step`` (embodied/algorithms/ppo.py) on one act() batch: evaluate, ppo_loss, backward, clip, Adam step."""
    dev = policy.device_
    with torch.no_grad():
        out = policy.act(make_obs(batch, args.image_size, args.seed + 1))
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-6)
    gen = torch.Generator().manual_seed(args.seed)
    advantages = torch.randn(batch, generator=gen).to(dev)
    old_logprobs, old_values = out.logprobs.to(dev), out.values.to(dev)
    returns = old_values + torch.randn(batch, generator=gen).to(dev)
    with torch.no_grad():  # before any step: evaluate must replay act, so the first ratio is 1 up to rounding
        first = policy.evaluate(out.forward_inputs, out.actions)[0]
    ratio_error = float((first.float() - old_logprobs).exp().sub(1).abs().max())

    def step() -> None:
        logprobs, entropy, values = policy.evaluate(out.forward_inputs, out.actions)
        loss = ppo_loss(logprobs, old_logprobs, advantages, values, old_values, returns, entropy,
                        clip_coef=0.2, vf_coef=0.5, ent_coef=0.01).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()

    def evaluate() -> None:
        with torch.no_grad():
            policy.evaluate(out.forward_inputs, out.actions)

    t = medians({"step": step, "evaluate": evaluate}, dev, args.repeats)
    row = StepRow(head, batch, t["step"], t["evaluate"], sum(p.numel() for p in params), ratio_error)
    print(f"  {head:15s} PPO step, batch {batch}: {1e3 * row.step_s:.1f} ms, evaluate {1e3 * row.evaluate_s:.1f} ms, "
          f"first max|ratio-1| {row.ratio_error:.1e}", flush=True)
    return row


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backbone", default="smolvlm-tiny", choices=["smolvlm-tiny", "qwen2_5_vl-tiny", "paligemma-tiny"],
                   help="named tiny backbone (built offline on first use)")
    p.add_argument("--model-path", default=None, help="a save_pretrained folder instead (e.g. SmolVLM-256M)")
    p.add_argument("--scale", default="tiny", choices=["tiny", "medium", "large"],
                   help="medium / large: build a ~119M / ~400M-parameter Idefics3 (SmolVLM) into a temporary folder")
    p.add_argument("--heads", default=",".join(DEFAULT_HEADS), help=f"action heads, comma-separated ({', '.join(HEADS)})")
    p.add_argument("--batches", default="8,32,128", help="act() batch sizes, comma-separated")
    p.add_argument("--ppo-batch", type=int, default=32, help="batch of the PPO minibatch step")
    p.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--chunk", type=int, default=4, help="policy.action_chunk (C)")
    p.add_argument("--action-dim", type=int, default=4, help="env action dimension (A)")
    p.add_argument("--image-size", type=int, default=64, help="env camera images, pixels per side")
    p.add_argument("--lora-rank", type=int, default=0, help="policy.lora_rank (0: the whole backbone trains)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median), after a warm-up")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="batch 2 only, 1 repeat: a smoke run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PNG to write")
    args = p.parse_args(argv)
    try:
        args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        p.error(f"--batches: comma-separated integers, got {args.batches!r}")
    args.heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    if unknown := [h for h in args.heads if h not in HEADS]:
        p.error(f"--heads: unknown {unknown}; known: {', '.join(HEADS)}")
    if args.quick:
        args.batches, args.ppo_batch, args.repeats = [2], 2, 1
    if min(args.batches + [args.ppo_batch, args.chunk, args.action_dim, args.repeats]) < 1:
        p.error("--batches, --ppo-batch, --chunk, --action-dim and --repeats must be >= 1")
    if args.scale != "tiny" and (args.model_path or args.backbone != "smolvlm-tiny"):
        p.error(f"--scale {args.scale} builds its own SmolVLM (Idefics3); drop --model-path / --backbone")
    return args


def run_head(args: argparse.Namespace, model_path: str, head: str) -> tuple[list[ActRow], StepRow, str]:
    """Build the policy for ``head``, time act/raw at every batch size, then the PPO step."""
    policy = make_policy(args, model_path, head)
    print(f"{head}: {policy.describe()}", flush=True)
    try:
        text = header(policy, args, model_path)
        rows = bench_act(policy, head, args.batches, args)
        step = bench_ppo_step(policy, head, args.ppo_batch, args)
    finally:
        del policy
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return rows, step, text


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every head, print the table, write the PNG; returns the rows and the PNG's path."""
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="vla-bench-") as tmp:
        if args.scale != "tiny":
            print(f"building the {args.scale} SmolVLM (Idefics3) ...", flush=True)
            model_path = str(build_medium_smolvlm(Path(tmp) / f"smolvlm-{args.scale}", args.seed, args.scale))
        else:
            model_path = args.model_path or f"tiny:{args.backbone}"
        act_rows, step_rows, text = [], [], ""
        for head in args.heads:
            rows, step, text = run_head(args, model_path, head)
            act_rows += rows
            step_rows.append(step)
    print()
    print(text)
    print(table(act_rows, step_rows))
    plot(act_rows, step_rows, text, args.out)
    print(f"wrote {args.out}")
    return {"act": act_rows, "ppo_step": step_rows, "out": args.out}


if __name__ == "__main__":
    main()

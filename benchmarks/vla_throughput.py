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
checkout does instead (how the H100 figures in ``docs/sft_then_rl.md`` were taken).

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

Then one PPO minibatch step per head, as ``ActorWorker._step`` does it: ``policy.evaluate`` on the
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
import inspect
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root

import numpy as np  # noqa: E402
import torch  # noqa: E402

from embodied.algorithms import ppo_loss  # noqa: E402
from embodied.policy import PolicySpec  # noqa: E402
from embodied.types import MAIN_IMAGES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs  # noqa: E402

HEADS = ("tokens", "autoregressive", "gaussian", "flow-k10", "flow-k4", "flow-k4-noise")
DEFAULT_HEADS = HEADS
INSTRUCTIONS = ("pick up the red cube", "pick up the green cube", "reach the red target",
                "push the red cube into the green goal region", "stack the red cube on the green cube",
                "pick up the red cube and place it at the green target")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "runs" / "benchmarks" / "vla_throughput.png"
# --scale medium: the tiny SmolVLM config with SmolLM2-135M's text widths and a small SigLIP-like tower.
MEDIUM_VISION = dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=6)
MEDIUM_TEXT = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                   num_key_value_heads=3, head_dim=64)
# --scale large: SmolLM2-360M's text widths, a SigLIP-B-like tower; with the expert below, ~400M parameters.
LARGE_VISION = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
LARGE_TEXT = dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                  num_key_value_heads=5, head_dim=64)
EXPERT = {"tiny": (128, 4, 4), "medium": (384, 6, 6), "large": (1024, 8, 8)}  # flow width, depth, heads per scale


def head_fields(head: str, scale: str) -> dict[str, Any]:
    """VLAConfig fields of a benchmark head name (``flow-k4-noise``: flow, 4 steps, Flow-Noise)."""
    if not head.startswith("flow"):
        return {"action_head": head}
    parts = head.split("-")
    width, depth, heads = EXPERT[scale]
    return {"action_head": "flow", "flow_steps": int(parts[1][1:]), "flow_logprob": parts[2] if len(parts) > 2 else "sde",
            "flow_width": width, "flow_depth": depth, "flow_heads": heads}


@dataclass
class ActRow:
    head: str
    batch: int
    act_s: float  # median seconds per act() call
    raw_s: float  # median seconds per raw transformers pass
    reference: str  # what the raw pass is

    @property
    def act_rate(self) -> float:
        return self.batch / self.act_s

    @property
    def raw_rate(self) -> float:
        return self.batch / self.raw_s

    @property
    def ratio(self) -> float:
        return self.raw_s / self.act_s


@dataclass
class StepRow:
    head: str
    batch: int
    step_s: float  # median seconds per PPO minibatch step
    evaluate_s: float  # median seconds of policy.evaluate alone (no_grad)
    trainable: int  # trainable parameters
    ratio_error: float  # max |exp(evaluate - act log-probs) - 1| before any update: the first PPO ratio's drift

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_s


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


# -- models and inputs -------------------------------------------------------------------------


def build_medium_smolvlm(out_dir: Path, seed: int = 0, scale: str = "medium") -> Path:
    """tiny.py's SmolVLM config with wider, deeper towers (``MEDIUM_*`` or ``LARGE_*``), saved with save_pretrained."""
    from transformers import AutoModelForImageTextToText

    from embodied.policies.vla.tiny import TINY_BACKBONES, quiet_transformers, train_tokenizer

    quiet_transformers()
    family, make_config = TINY_BACKBONES["smolvlm-tiny"]
    tokenizer = train_tokenizer(family)
    tiny = make_config(tokenizer)
    cfg = tiny.to_dict()
    cfg["vision_config"].update(MEDIUM_VISION if scale == "medium" else LARGE_VISION)
    cfg["text_config"].update(MEDIUM_TEXT if scale == "medium" else LARGE_TEXT)
    config = type(tiny).from_dict(cfg)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def make_policy(args: argparse.Namespace, model_path: str, head: str) -> Any:
    from embodied.policies.vla.configuration import VLAConfig
    from embodied.policies.vla.modeling import VLAPolicy

    side = args.image_size
    spec = PolicySpec(state_dim=0, image_shape=(side, side, 3), action_dim=args.action_dim,
                      action_low=(-1.0,) * args.action_dim, action_high=(1.0,) * args.action_dim,
                      wrist_image_shape=(side, side, 3))
    config = VLAConfig(model_path=model_path, action_chunk=args.chunk, lora_rank=args.lora_rank,
                       device=args.device, dtype=args.dtype, **head_fields(head, args.scale))
    torch.manual_seed(args.seed)
    return VLAPolicy(config, spec)


def make_obs(batch: int, side: int, seed: int) -> Obs:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(2, batch, side, side, 3), dtype=np.uint8)
    return {MAIN_IMAGES: images[0], WRIST_IMAGES: images[1],
            TASK_DESCRIPTIONS: [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(batch)]}


def raw_inputs(policy: Any, obs: Obs, extra: int) -> dict[str, Any]:
    """The backbone's keyword inputs for ``obs``, built by the policy's processor, on its device.

    ``extra`` placeholder ids (the pad id, as the tokens/gaussian heads append them) follow the prompt;
    with them the inputs are embeddings, the heads' learned slot embeddings added to the placeholders.
    """
    dev, proc = policy.device_, policy.processor
    prompt = proc.prompts(list(obs[TASK_DESCRIPTIONS]))
    ids, mask = prompt.input_ids.to(dev), prompt.attention_mask.to(dev)
    if extra:
        ids = torch.cat([ids, torch.full((ids.shape[0], extra), proc.pad_id, dtype=ids.dtype, device=dev)], 1)
        mask = torch.cat([mask, torch.ones(mask.shape[0], extra, dtype=mask.dtype, device=dev)], 1)
    images = [torch.as_tensor(obs[MAIN_IMAGES])] + ([torch.as_tensor(obs[WRIST_IMAGES])] if policy.use_wrist else [])
    inputs = {"input_ids": ids, "attention_mask": mask, **proc.pixel_inputs(images, dev, policy.dtype_)}
    if proc.family == "qwen":
        inputs["mm_token_type_ids"] = (ids == proc.image_token_id).int()
    slots = getattr(policy.head, "slots", None)
    if extra and slots is not None:
        with torch.no_grad():
            embeds = policy.backbone.get_input_embeddings()(inputs.pop("input_ids"))
            embeds[:, -extra:] += slots.to(embeds.dtype)
        inputs["inputs_embeds"] = embeds
    return inputs


def _keep(backbone: Any, n: int) -> dict[str, int]:
    """``logits_to_keep=n`` where the model's forward takes it."""
    return {"logits_to_keep": n} if "logits_to_keep" in inspect.signature(backbone.forward).parameters else {}


# -- the raw passes ----------------------------------------------------------------------------


def raw_single_pass(policy: Any, inputs: dict[str, Any], keep: int) -> Callable[[], Any]:
    """One forward over prompt + placeholders (the tokens and gaussian heads' work)."""
    kwargs = {**inputs, "use_cache": False, **_keep(policy.backbone, keep)}
    return lambda: policy.backbone(**kwargs).logits


def raw_cached_decode(policy: Any, inputs: dict[str, Any], steps: int) -> Callable[[], Any]:
    """Prompt forward filling the KV cache, then ``steps - 1`` cached one-token steps (greedy bins)."""
    backbone, proc = policy.backbone, policy.processor
    n_bins, first_bin = policy.action_tokenizer.n_bins, policy.action_tokenizer.first_token_id
    keep = _keep(backbone, 1)
    pixels = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}

    def run() -> torch.Tensor:
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        positions = proc.positions(backbone.model, ids, mask, pixels)  # qwen: the model's own get_rope_index
        out = backbone(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **pixels, **keep)
        tokens = []
        for k in range(steps):
            tokens.append(out.logits[:, -1, -n_bins:].argmax(-1) + first_bin)
            if k + 1 < steps:
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
                out = backbone(input_ids=tokens[-1][:, None], attention_mask=mask,
                               position_ids=positions[..., -1:] + k + 1, past_key_values=out.past_key_values,
                               use_cache=True, **keep)
        return torch.stack(tokens, 1)

    return run


def raw_prefix_pass(policy: Any, inputs: dict[str, Any]) -> Callable[[], Any]:
    """One forward over the prompt returning every layer's hidden states (what the flow expert reads)."""
    kwargs = {**inputs, "use_cache": False, "output_hidden_states": True, **_keep(policy.backbone, 1)}
    return lambda: policy.backbone(**kwargs).hidden_states


def raw_pass(policy: Any, head: str, obs: Obs) -> tuple[Callable[[], Any], str]:
    """The raw transformers work ``head`` needs for ``obs``, and a short description of it."""
    size = policy.chunk * policy.action_dim
    if head.startswith("flow"):
        return raw_prefix_pass(policy, raw_inputs(policy, obs, 0)), "1 prompt forward, all hidden states"
    if head == "autoregressive":
        return raw_cached_decode(policy, raw_inputs(policy, obs, 0), size), f"prompt+{size - 1} cached steps"
    keep = size if head == "tokens" else 1
    return raw_single_pass(policy, raw_inputs(policy, obs, size), keep), f"1 forward, keep {keep}"


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
    """``ActorWorker._step`` on one act() batch: evaluate, ppo_loss, backward, clip, Adam step."""
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


# -- report ------------------------------------------------------------------------------------


def header(policy: Any, args: argparse.Namespace, model_path: str) -> str:
    params = sum(p.numel() for p in policy.backbone.parameters())
    threads = "" if policy.device_.type == "cuda" else f", {torch.get_num_threads()} torch threads"
    return (f"VLA throughput on {policy.device_}{threads}, dtype {args.dtype}\n"
            f"backbone {type(policy.backbone).__name__} ({policy.backbone.config.model_type}), "
            f"{params / 1e6:.2f}M parameters, from {model_path}\n"
            f"action chunk {args.chunk} x action dim {args.action_dim}, main + wrist uint8 {args.image_size}x"
            f"{args.image_size} resized to {policy.processor.image_size}, prompt length {policy.processor.length}, "
            f"LoRA rank {args.lora_rank}; medians of {args.repeats} runs after a warm-up")


def table(act_rows: list[ActRow], step_rows: list[StepRow]) -> str:
    lines = [f"{'head':15s} {'batch':>5s} {'act chunks/s':>13s} {'raw chunks/s':>13s} {'act/raw':>8s}  raw pass"]
    for r in act_rows:
        lines.append(f"{r.head:15s} {r.batch:5d} {r.act_rate:13.1f} {r.raw_rate:13.1f} {r.ratio:8.2f}  {r.reference}")
    lines += ["", "PPO minibatch step (evaluate + ppo_loss + backward + clip + Adam), and evaluate alone (no_grad)",
              f"{'head':15s} {'batch':>5s} {'ms/step':>10s} {'samples/s':>10s} {'evaluate ms':>12s} {'trainable':>12s} "
              f"{'max|ratio-1|':>13s}"]
    for s in step_rows:
        lines.append(f"{s.head:15s} {s.batch:5d} {1e3 * s.step_s:10.1f} {s.samples_per_s:10.1f} "
                     f"{1e3 * s.evaluate_s:12.1f} {s.trainable:12,d} {s.ratio_error:13.1e}")
    return "\n".join(lines)


def plot(act_rows: list[ActRow], step_rows: list[StepRow], title: str, out: Path) -> None:
    """Throughput, act/raw ratio and PPO step time, as a PNG (matplotlib's Agg canvas, no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.6))
    FigureCanvasAgg(fig)
    rate_ax, ratio_ax, step_ax = fig.subplots(1, 3)
    for i, head in enumerate(HEADS):
        rows = [r for r in act_rows if r.head == head]
        if not rows:
            continue
        b, color = [r.batch for r in rows], f"C{i}"
        rate_ax.plot(b, [r.act_rate for r in rows], "o-", color=color, label=f"{head} act()")
        rate_ax.plot(b, [r.raw_rate for r in rows], "s--", color=color, alpha=0.6, label=f"{head} raw")
        ratio_ax.plot(b, [r.ratio for r in rows], "o-", color=color, label=head)
    batches = sorted({r.batch for r in act_rows})
    for ax in (rate_ax, ratio_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.grid(alpha=0.3)
    rate_ax.set_yscale("log")
    rate_ax.set(ylabel="action chunks / s", title="act() vs raw transformers")
    ratio_ax.axhline(0.9, color="k", ls=":", label="goal 0.9")
    ratio_ax.set(ylabel="act / raw throughput", title="framework / raw")
    step_ax.bar([s.head for s in step_rows], [1e3 * s.step_s for s in step_rows],
                color=[f"C{HEADS.index(s.head)}" for s in step_rows])
    step_ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    batch = step_rows[0].batch if step_rows else 0
    step_ax.set(ylabel="ms per step", title=f"PPO minibatch step, batch {batch}")
    rate_ax.legend(fontsize=7)
    ratio_ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


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

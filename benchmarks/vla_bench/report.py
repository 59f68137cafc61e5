"""The benchmark's rows, its table and its plot."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.vla_bench.models import HEADS


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

"""Full-size π0 or π0.5 on a GPU: bf16, LoRA, the figures a user sizes a run by.

    python -m benchmarks.pi0_gpu [--model pi05] [--size full] [--lora-rank 16] [--act-batches 1 8] [--ppo-batches 8]
    python -m benchmarks.pi0_gpu --size tiny --device cpu --dtype float32   # the same code path, on a CPU

The model is transformers' ``PI0ForConditionalGeneration`` built from ``PI0Config()`` (3.5B parameters: a
PaliGemma 2B VLM and a 300M-class Gemma action expert) with random weights, since nothing can be downloaded
here; speed and memory do not depend on the weights' values. ``--model pi05`` builds π0.5 of the same sizes
(``PI05ForConditionalGeneration``: the adaRMS expert, the state in the prompt; 3.6B) and runs ``PI05Policy``.
It is built straight on the device: writing and re-reading 7 GB through ``save_pretrained`` would only spend
device time, so the policy's loader is replaced by a builder for this run (everything after it is the policy as
training uses it). Two 224 px cameras (LIBERO's main and wrist views), an 8-dim state and 7-dim actions, the
checkpoint's 10 Euler steps and 50-step chunk.

Printed, and written as JSON with ``--json``:

- ``act`` at each batch: chunks/s of our recorded loop (prompt, images, prefix, Euler steps, value head), and
  transformers' ``sample_actions`` on the same inputs, with peak memory;
- one PPO minibatch at each batch (Flow-Noise ``evaluate`` of every Euler step with gradients in one batched
  pass, clipped loss, value loss, backward, gradient clipping, AdamW on the trainable tensors): time, peak
  memory, and the first ratio's distance from 1 (bf16 arithmetic differs between act's and evaluate's batch
  shapes, so it is not exactly 1 as it is in float32).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import numpy as np
import torch

import embodied.policies.pi0.modeling as pi0_modeling
from embodied.policies.flow_logprob import CHAIN
from embodied.policies.pi0.configuration import PI0PolicyConfig
from embodied.policies.pi0.modeling import PI0Policy
from embodied.policy.base import PolicySpec

IMAGE = 224
SPEC = PolicySpec(state_dim=8, image_shape=(IMAGE, IMAGE, 3), action_dim=7, action_low=(-1.0,) * 7,
                  action_high=(1.0,) * 7, wrist_image_shape=(IMAGE, IMAGE, 3))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def write_config_folder(size: str, out: Path, model: str = "pi0") -> Path:
    """``config.json`` (PI0Config, or a PI05Config of its sizes) and a tokenizer: a folder without weights."""
    from transformers import PI0Config

    from embodied.policies.pi0.pretrained import tiny_pi0_config
    from embodied.policies.pi05.pretrained import as_pi05_config
    from embodied.policies.vla.tiny import train_tokenizer

    tokenizer = train_tokenizer("paligemma")
    tokenizer.bos_token = "<bos>"
    if size == "full":
        config = PI0Config()
        config.vlm_config.image_token_id = tokenizer.convert_tokens_to_ids("<image>")  # ours, inside the vocabulary
    else:
        config = tiny_pi0_config(tokenizer, chunk_size=50)
    if model == "pi05":
        config = as_pi05_config(config)
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def random_weights_loader(device: torch.device, model_class: Any) -> Callable[..., tuple[Any, Any, str]]:
    """A stand-in for ``load_pi0`` / ``load_pi05``: the folder's config with random weights, built on ``device``."""
    def load(path: Path, dtype: torch.dtype, tokenizer_path: str | None) -> tuple[Any, Any, str]:
        from transformers import AutoTokenizer

        with torch.device(device):
            model = model_class(model_class.config_class.from_pretrained(path)).to(dtype)
        return model, AutoTokenizer.from_pretrained(path), "random-weight"
    return load


def build_policy(kind: str, folder: Path, on: torch.device, **fields: Any) -> PI0Policy:
    """``PI0Policy`` or ``PI05Policy`` over the folder, its weights random and built on ``on`` (this call only)."""
    from transformers import PI0ForConditionalGeneration

    from embodied.policies.pi05.configuration import PI05PolicyConfig
    from embodied.policies.pi05.model import PI05ForConditionalGeneration
    from embodied.policies.pi05.modeling import PI05Policy

    if kind == "pi05":  # π0.5's loader is a class attribute; π0's is looked up in its module when called
        loader = random_weights_loader(on, PI05ForConditionalGeneration)
        with mock.patch.object(PI05Policy, "load_model", staticmethod(loader)):
            return PI05Policy(PI05PolicyConfig(model_path=str(folder), **fields), SPEC)
    with mock.patch.object(pi0_modeling, "load_pi0", random_weights_loader(on, PI0ForConditionalGeneration)):
        return PI0Policy(PI0PolicyConfig(model_path=str(folder), **fields), SPEC)


def observations(batch: int) -> dict:
    rng = np.random.default_rng(0)
    return {"main_images": rng.integers(0, 255, (batch, IMAGE, IMAGE, 3), dtype=np.uint8),
            "wrist_images": rng.integers(0, 255, (batch, IMAGE, IMAGE, 3), dtype=np.uint8),
            "states": rng.standard_normal((batch, 8)).astype(np.float32),
            "task_descriptions": ["pick up the red cube and place it at the green target"] * batch}


class Meter:
    """Wall time of a call (synchronised on a GPU) and the peak memory it allocated."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def best(self, fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
        """(best ms of ``repeats`` after a warm-up, peak GiB over them; 0 on a CPU)."""
        fn()
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else 0.0
        return 1000 * min(times), peak

    def allocated(self) -> float:
        return torch.cuda.memory_allocated() / 2**30 if self.cuda else 0.0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["pi0", "pi05"], default="pi0")
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bfloat16")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--action-chunk", type=int, default=5, help="executed actions per chunk (scored by PPO)")
    parser.add_argument("--flow-steps", type=int, default=None, help="Euler steps (default: the checkpoint's 10)")
    parser.add_argument("--freeze-vlm", action="store_true", help="train the action expert and heads only")
    parser.add_argument("--act-batches", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--ppo-batches", type=int, nargs="*", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=None, help="the config-only folder (default: /tmp/<model>-config-only)")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)
    device = torch.device(args.device)
    meter = Meter(device)
    result: dict[str, Any] = {"model": args.model, "size": args.size, "dtype": args.dtype, "lora_rank": args.lora_rank,
                              "freeze_vlm": args.freeze_vlm,
                              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "act": [], "ppo": []}
    print(f"{result['device']}, torch {torch.__version__}")

    folder = write_config_folder(args.size, Path(args.folder or f"/tmp/{args.model}-config-only"), args.model)
    t0 = time.perf_counter()
    policy = build_policy(args.model, folder, device, action_chunk=args.action_chunk, flow_logprob="noise",
                          lora_rank=args.lora_rank, dtype=args.dtype, device=device.type, flow_steps=args.flow_steps,
                          freeze_vlm=args.freeze_vlm)
    result["build_s"] = time.perf_counter() - t0
    result["describe"] = policy.describe()
    result["weights_gib"] = meter.allocated()
    result["trainable"] = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    print(result["describe"])
    print(f"built in {result['build_s']:.1f} s; {result['weights_gib']:.2f} GiB allocated after building")

    for batch in args.act_batches:
        obs = observations(batch)
        out = policy.act(obs, deterministic=True)
        prompt = policy._prompt_inputs(out.forward_inputs)
        state, noise = policy._state(out.forward_inputs), out.forward_inputs[CHAIN][:, 0].to(device)
        ours, peak = meter.best(lambda: policy.act(obs, deterministic=True), args.repeats)
        theirs, _ = meter.best(lambda: policy.model.sample_actions(state=state, noise=noise.to(policy.dtype_),
                                                                    num_steps=policy.steps, **prompt), args.repeats)
        row = {"batch": batch, "ours_ms": ours, "sample_actions_ms": theirs, "chunks_per_s": 1000 * batch / ours,
               "ratio": theirs / ours, "peak_gib": peak}
        result["act"].append(row)
        print(f"act batch {batch:3d}: {ours:8.1f} ms = {row['chunks_per_s']:7.1f} chunks/s; sample_actions "
              f"{theirs:8.1f} ms (ours at {row['ratio']:.2f}x its throughput); peak {peak:.2f} GiB")

    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    for batch in args.ppo_batches:
        out = policy.act(observations(batch))
        inputs, old = out.forward_inputs, out.logprobs.to(device)
        advantages = torch.randn(old.shape[0], device=device)

        def ppo_minibatch() -> None:
            logprobs, _, values = policy.evaluate(inputs, out.actions)
            ratio = (logprobs.sum(-1) - old.sum(-1)).exp()
            surrogate = torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
            loss = -surrogate.mean() + 0.5 * values.pow(2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()

        with torch.no_grad():
            first = float((policy.evaluate(inputs, out.actions)[0] - old).exp().sub(1).abs().max())
        try:
            ms, peak = meter.best(ppo_minibatch, args.repeats)
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            result["ppo"].append({"batch": batch, "oom": True, "first_ratio_error": first})
            print(f"PPO minibatch {batch:3d}: out of memory; first max|ratio-1| {first:.1e}")
            continue
        result["ppo"].append({"batch": batch, "ms": ms, "peak_gib": peak, "first_ratio_error": first})
        print(f"PPO minibatch {batch:3d}: {ms:8.1f} ms ({policy.steps} Euler steps scored, chunk "
              f"{args.action_chunk}); peak {peak:.2f} GiB; first max|ratio-1| {first:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

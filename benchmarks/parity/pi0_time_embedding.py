"""What transformers' float32 flow-time embedding is worth against LeRobot's float64 one, on a full-size π0.

transformers' ``PI0TimestepEmbeddings`` computes the sinusoid of the flow time in float32; LeRobot (and openpi)
compute ``create_sinusoidal_pos_embedding`` in float64 and cast the result to the time's dtype. At the tiny size of
the parity cases the difference is about 2e-5 in the velocity. This script measures it where it matters: a
full-size ``PI0ForConditionalGeneration`` (``PI0Config()``, 3.5B parameters, random weights: nothing can be
downloaded, and the rounding does not depend on them) in float32 and bfloat16, on the same inputs and noise, with
only the time embedding swapped. For scale it also prints the bfloat16 model against the float32 one.

Needs only torch and transformers (>= 5.13), so it runs on a GPU machine without this project installed::

    python benchmarks/parity/pi0_time_embedding.py --device cuda --out results.json
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch


def float64_sinusoid(config):
    """LeRobot's ``create_sinusoidal_pos_embedding``: periods and products in float64, cast to the time's dtype."""
    def forward(t: torch.Tensor) -> torch.Tensor:
        fraction = torch.linspace(0.0, 1.0, config.dit_config.hidden_size // 2, dtype=torch.float64, device=t.device)
        period = config.min_period * (config.max_period / config.min_period) ** fraction
        x = (1.0 / period * 2 * math.pi)[None, :] * t[:, None].double()
        return torch.cat([x.sin(), x.cos()], dim=1).to(t.dtype)
    return forward


def inputs(config, batch: int, device: torch.device, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Two 224 px cameras, a 48-token prompt with padding, a 32-dim state, and the flow's initial noise."""
    vlm = config.vlm_config
    side, patch = vlm.vision_config.image_size, vlm.vision_config.patch_size
    image_tokens = 2 * (side // patch) ** 2
    text = torch.randint(2, 20_000, (batch, 48), generator=generator)
    lengths = torch.randint(8, 48, (batch,), generator=generator)
    mask = torch.cat([torch.ones(batch, image_tokens, dtype=torch.long),
                      (torch.arange(48)[None, :] < lengths[:, None]).long()], 1)
    ids = torch.cat([torch.full((batch, image_tokens), vlm.image_token_id), text], 1)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
            "pixel_values": (torch.rand(batch, 2, 3, side, side, generator=generator) * 2 - 1).to(device),
            "pixel_attention_mask": torch.ones(batch, 2, dtype=torch.bool, device=device),
            "state": torch.randn(batch, config.max_state_dim, generator=generator).to(device),
            "noise": torch.randn(batch, config.chunk_size, config.max_action_dim, generator=generator).to(device)}


@torch.no_grad()
def chunk(model, x: dict[str, torch.Tensor], dtype: torch.dtype, steps: int) -> torch.Tensor:
    return model.sample_actions(state=x["state"].to(dtype), input_ids=x["input_ids"], noise=x["noise"].to(dtype),
                                attention_mask=x["attention_mask"], pixel_values=x["pixel_values"].to(dtype),
                                pixel_attention_mask=x["pixel_attention_mask"], num_steps=steps).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="Euler steps (LeRobot's num_inference_steps)")
    parser.add_argument("--action-dim", type=int, default=7, help="the env's action dimensions (LIBERO: 7)")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--smoke", action="store_true", help="a few-layer, narrow π0: checks the script, not a figure")
    args = parser.parse_args()
    import transformers
    from transformers import PI0Config, PI0ForConditionalGeneration

    device = torch.device(args.device)
    config = PI0Config()
    if args.smoke:
        small = dict(num_hidden_layers=1, intermediate_size=64, hidden_size=64, head_dim=16, vocab_size=20_000)
        config = PI0Config(vlm_config=dict(text_config=small, projection_dim=64, image_token_id=19_999,
                                           vision_config=dict(num_hidden_layers=1, hidden_size=64, intermediate_size=64,
                                                              num_attention_heads=4)),
                           dit_config={k: v for k, v in small.items() if k != "vocab_size"})
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device(device):
        model = PI0ForConditionalGeneration(config).eval()
    built = time.perf_counter() - start
    embed = model.embed_action_time.sinusoid_embeds
    x = inputs(config, args.batch, device, torch.Generator().manual_seed(1))
    times = torch.tensor([1.0 - i / args.steps for i in range(args.steps)], device=device)
    a = args.action_dim
    report: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "parameters_M": sum(p.numel() for p in model.parameters()) / 1e6, "build_s": round(built, 1),
                    "batch": args.batch, "steps": args.steps, "chunk": config.chunk_size, "action_dim": a}
    report["time_embedding_max_abs"] = float((embed(times) - float64_sinusoid(config)(times)).abs().max())
    ours = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model.to(dtype)
        first = chunk(model, x, dtype, args.steps)
        again = chunk(model, x, dtype, args.steps)
        original = embed.forward
        embed.forward = float64_sinusoid(config)
        lerobot_time = chunk(model, x, dtype, args.steps)
        embed.forward = original
        ours[name] = first
        report[name] = {"chunk_abs_mean": float(first[..., :a].abs().mean()),
                        "rerun_max_abs": float((first - again)[..., :a].abs().max()),
                        "float64_time_max_abs": float((first - lerobot_time)[..., :a].abs().max()),
                        "float64_time_mean_abs": float((first - lerobot_time)[..., :a].abs().mean()),
                        "float64_time_first_action_max_abs": float((first - lerobot_time)[:, 0, :a].abs().max())}
    report["bfloat16_vs_float32_max_abs"] = float((ours["bfloat16"] - ours["float32"])[..., :a].abs().max())
    report["bfloat16_vs_float32_mean_abs"] = float((ours["bfloat16"] - ours["float32"])[..., :a].abs().mean())
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

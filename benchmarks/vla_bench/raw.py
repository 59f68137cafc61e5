"""The raw transformers work each head needs, on the inputs the policy's own processor builds: what ``act()``
is compared with (the module docstring of ``benchmarks/vla_throughput.py`` says which pass for which head)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from embodied.core.types import MAIN_IMAGES, TASK_DESCRIPTIONS, WRIST_IMAGES, Obs


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

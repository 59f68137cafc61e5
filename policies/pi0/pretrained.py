"""Where a π0 comes from: a transformers folder, a LeRobot folder, or a tiny one built offline.

    from embodied.policies.pi0.pretrained import build_tiny_pi0, load_pi0
    build_tiny_pi0("runs/pi0-tiny")                     # tokenizer + random weights, save_pretrained
    model, tokenizer, source = load_pi0(Path("runs/pi0-tiny"), torch.float32, tokenizer_path=None)

A **LeRobot** π0 folder (``lerobot/pi0_base``, ``lerobot/pi0_libero``) holds ``model.safetensors``
in LeRobot's key layout and LeRobot's own ``config.json`` (``"type": "pi0"``, ``paligemma_variant``,
``action_expert_variant``, ``chunk_size`` ...). Its config is translated into a ``PI0Config``
(:func:`lerobot_pi0_config`) and its weights load through ``from_pretrained``, whose conversion
mapping for ``pi0`` renames ``paligemma_with_expert.*`` to ``model.vlm`` / ``model.dit`` and the
projections to ``embed_action_time.*``. LeRobot ships no tokenizer (it loads PaliGemma's from the
hub): give ``policy.tokenizer_path``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from embodied.policies.pi0.folders import TINY_NAMES, is_lerobot_config, read_config_json
from embodied.policies.transformers_base import folders
from embodied.policies.transformers_base.tiny import save_tiny, train_tokenizer

# LeRobot's Gemma variants (openpi's get_config): the VLM's language model and the action expert.
VARIANTS: dict[str, dict[str, int]] = {
    "gemma_300m": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=18, num_attention_heads=8,
                       num_key_value_heads=1, head_dim=256),
    "gemma_2b": dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
                     num_key_value_heads=1, head_dim=256),
}
# LeRobot's π0 fuses the VLM's and the expert's attention and reshapes it by 8 heads, so every LeRobot π0 has 8.
LEROBOT_HEADS = 8
# LeRobot's fields that are PI0Config's under the same name (num_steps is the older name of num_inference_steps).
SAME_FIELDS = ("chunk_size", "max_state_dim", "max_action_dim", "num_inference_steps", "time_sampling_beta_alpha",
               "time_sampling_beta_beta", "time_sampling_scale", "time_sampling_offset", "min_period", "max_period")
WEIGHTS = "model.safetensors"
# Where LeRobot keeps the VLM's token embedding and the head that transformers' mapping also loads into it.
EMBED_KEY = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
LM_HEAD_KEY = "paligemma_with_expert.paligemma.lm_head.weight"


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a folder's ``model.safetensors``, read from its header (no tensor is loaded), keys
    without LeRobot's leading ``model.``."""
    from safetensors import safe_open

    with safe_open(str(path / WEIGHTS), "pt") as f:
        return {k.removeprefix("model."): tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def _gemma_sizes(shapes: dict[str, tuple[int, ...]], prefix: str, where: str) -> dict[str, int]:
    """A Gemma stack's sizes from its weights: layers counted, widths read off the first layer's projections."""
    layer = f"{prefix}.layers.0."
    needed = [layer + n for n in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.gate_proj.weight")]
    missing = [k for k in needed if k not in shapes]
    if missing:
        raise ValueError(f"{where}: no {missing[0]} in {WEIGHTS} (not a LeRobot π0's key layout)")
    depth = len({k[len(prefix) + 8:].split(".")[0] for k in shapes if k.startswith(f"{prefix}.layers.")})
    q, width = shapes[needed[0]]
    head_dim = q // LEROBOT_HEADS
    return dict(hidden_size=width, intermediate_size=shapes[needed[2]][0], num_hidden_layers=depth,
                num_attention_heads=LEROBOT_HEADS, num_key_value_heads=shapes[needed[1]][0] // head_dim,
                head_dim=head_dim)


def lerobot_pi0_config(lerobot: dict[str, Any], shapes: dict[str, tuple[int, ...]] | None = None,
                       where: str = "policy.model_path") -> Any:
    """A transformers ``PI0Config`` from a LeRobot π0 ``config.json`` and, when given, its weights' shapes.

    The shapes are the truth: the VLM's and the expert's widths, depths and heads, the vocabulary and the SigLIP
    tower are read off them (a folder whose variant names disagree with its weights still loads as what it holds).
    Without shapes the named variants give them."""
    from transformers import PI0Config

    defaults = PI0Config()
    vlm = defaults.vlm_config.to_dict()
    variant = lerobot.get("paligemma_variant", "gemma_2b")
    expert = lerobot.get("action_expert_variant", "gemma_300m")
    resolution = lerobot.get("image_resolution") or [vlm["vision_config"]["image_size"]] * 2
    if resolution[0] != resolution[1]:
        raise ValueError(f"{where}: LeRobot config image_resolution={resolution} is not square")
    vlm["vision_config"]["image_size"] = int(resolution[0])
    if shapes is None:
        for name, value in (("paligemma_variant", variant), ("action_expert_variant", expert)):
            if value not in VARIANTS:
                raise ValueError(f"{where}: LeRobot config {name}={value!r} is unknown; known: {', '.join(VARIANTS)}")
        text, dit_sizes = VARIANTS[variant], VARIANTS[expert]
    else:
        text = _gemma_sizes(shapes, "paligemma_with_expert.paligemma.model.language_model", where)
        text["vocab_size"] = shapes[EMBED_KEY][0] if EMBED_KEY in shapes else shapes[LM_HEAD_KEY][0]
        dit_sizes = _gemma_sizes(shapes, "paligemma_with_expert.gemma_expert.model", where)
        vlm["vision_config"].update(_siglip_sizes(shapes))
        vlm["projection_dim"] = text["hidden_size"]
    vlm["text_config"].update(text)
    fields = {k: lerobot[k] for k in SAME_FIELDS if k in lerobot}
    if "num_inference_steps" not in fields and "num_steps" in lerobot:
        fields["num_inference_steps"] = lerobot["num_steps"]
    dit = defaults.dit_config.to_dict() | dit_sizes
    return PI0Config(vlm_config=vlm, dit_config=dit, **fields)


def _siglip_sizes(shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The SigLIP tower's width, depth, MLP and patch from its weights (its heads stay SigLIP-so400m's 16)."""
    tower = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
    patch = shapes[tower + "embeddings.patch_embedding.weight"]
    depth = len({k[len(tower) + 15:].split(".")[0] for k in shapes if k.startswith(tower + "encoder.layers.")})
    return dict(hidden_size=patch[0], patch_size=patch[-1], num_hidden_layers=depth,
                intermediate_size=shapes[tower + "encoder.layers.0.mlp.fc1.weight"][0])


def is_lerobot_folder(path: Path) -> bool:
    return is_lerobot_config(read_config_json(path) or {})


def load_pi0(path: Path, dtype: torch.dtype, tokenizer_path: str | None) -> tuple[Any, Any, str]:
    """(PI0ForConditionalGeneration, tokenizer, "transformers" or "LeRobot") from a model folder."""
    from transformers import PI0ForConditionalGeneration

    lerobot = is_lerobot_folder(path)
    try:
        if lerobot:
            config = lerobot_pi0_config(read_config_json(path) or {}, weight_shapes(path))
            model = PI0ForConditionalGeneration.from_pretrained(path, config=config, dtype=dtype)
            use_trained_embedding(model, path)
        else:
            model = PI0ForConditionalGeneration.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"policy.model_path: {str(path)!r} does not load as a π0: {exc}") from None
    tokenizer = folders.load_tokenizer(path, tokenizer_path, hint=" (a LeRobot folder has none: set "
                                                                   "policy.tokenizer_path to PaliGemma's)")
    return model, tokenizer, "LeRobot" if lerobot else "transformers"


def use_trained_embedding(model: Any, path: Path) -> None:
    """Load the VLM's token embedding from LeRobot's ``embed_tokens`` tensor, as LeRobot itself ends up doing.

    LeRobot does not tie ``paligemma.lm_head`` to ``embed_tokens`` and saves both; its fine-tuning trains the
    embedding (π0 never reads the head). transformers' conversion mapping for ``pi0`` renames both onto the one
    embedding and the head wins, so a fine-tuned folder would act with the base model's embedding. LeRobot's loader
    copies the head into the embedding only when the folder has no ``embed_tokens`` (openpi's conversions), and so
    does this: the head stays where transformers put it then. A warning says when the two tensors disagree."""
    from safetensors import safe_open

    with safe_open(str(path / WEIGHTS), "pt") as f:
        keys = {k.removeprefix("model."): k for k in f.keys()}
        if EMBED_KEY not in keys:
            return
        embed = f.get_tensor(keys[EMBED_KEY])
        head = f.get_tensor(keys[LM_HEAD_KEY]) if LM_HEAD_KEY in keys else None
    target = model.model.vlm.get_input_embeddings().weight
    with torch.no_grad():
        target.copy_(embed.to(target.dtype))
    if head is not None and head.shape == embed.shape and not torch.equal(head, embed):
        diff = (head.float() - embed.float()).abs().max().item()
        warnings.warn(f"policy.model_path {str(path)!r}: the VLM's lm_head and embed_tokens differ (max {diff:.3g}); "
                      "using embed_tokens, the tensor LeRobot's π0 reads and fine-tunes (lm_head is never read, so "
                      "it keeps the base model's values)", stacklevel=3)


def seed_vlm(model: Any, folder: Path) -> int:
    """Copy a PaliGemma folder's weights (vision tower, projector, language model) into π0's VLM; the
    vocabulary's shared rows only, where a tokens head added action bins after them. Returns the tensors copied."""
    from transformers import PaliGemmaForConditionalGeneration

    source = PaliGemmaForConditionalGeneration.from_pretrained(folder, dtype=next(model.parameters()).dtype)
    theirs = source.model.state_dict()
    mine = model.model.vlm.state_dict()
    for key, value in mine.items():
        if key not in theirs:
            raise ValueError(f"policy.init_vlm_from: {folder} has no {key} (another PaliGemma shape?)")
        other = theirs[key]
        if other.shape == value.shape:
            value.copy_(other)
        elif key.endswith("embed_tokens.weight") and other.shape[1:] == value.shape[1:]:
            rows = min(len(value), len(other))
            value[:rows].copy_(other[:rows])
        else:
            raise ValueError(f"policy.init_vlm_from: {key} is {tuple(other.shape)} in {folder}, "
                             f"{tuple(value.shape)} in π0's VLM")
    return len(mine)


# -- tiny, offline ----------------------------------------------------------------------------


def tiny_pi0_config(tokenizer: Any, chunk_size: int = 4) -> Any:
    """A few-million-parameter π0 whose VLM has ``paligemma-tiny``'s shapes (so a tokens-head PaliGemma
    SFT can seed it) and whose action expert matches its layers, heads and head size (shared attention)."""
    from transformers import PI0Config

    vocab = len(tokenizer)
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    shared = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=48)
    return PI0Config(
        vlm_config=dict(model_type="paligemma", image_token_id=image_token, projection_dim=192,
                        vision_config=dict(model_type="siglip_vision_model", hidden_size=96, intermediate_size=192,
                                           num_hidden_layers=2, num_attention_heads=2, image_size=64, patch_size=16,
                                           vision_use_head=False),
                        text_config=dict(model_type="gemma", vocab_size=vocab, hidden_size=192,
                                         intermediate_size=512, max_position_embeddings=1024, **shared)),
        dit_config=dict(model_type="gemma", hidden_size=96, intermediate_size=256, **shared),
        chunk_size=chunk_size, max_state_dim=32, max_action_dim=32, num_inference_steps=4,
    )


def build_tiny_pi0(out_dir: str | Path, seed: int = 0) -> Path:
    """Tokenizer trained on the task texts + random-weight tiny π0, written atomically with save_pretrained."""
    from transformers import PI0ForConditionalGeneration

    folders.quiet_transformers()
    tokenizer = train_tokenizer("paligemma")
    tokenizer.bos_token = "<bos>"
    with torch.random.fork_rng(devices=[]):  # building on first use leaves the caller's random stream as it was
        torch.manual_seed(seed)
        model = PI0ForConditionalGeneration(tiny_pi0_config(tokenizer))
    return save_tiny(out_dir, model, tokenizer)


def make_tiny(out_dir: str | Path, name: str, seed: int = 0) -> str:
    """``embodied make-tiny-vla --backbone pi0-tiny``: the tiny π0 in ``out_dir``; what was written."""
    return describe_pi0(build_tiny_pi0(out_dir, seed))


def resolve_model_path(model_path: str) -> Path:
    """A local folder for ``policy.model_path``; ``tiny:pi0-tiny`` is built into the cache once."""
    return folders.resolve_model_path(model_path, "tiny-pi0", TINY_NAMES, lambda path, _: build_tiny_pi0(path), "π0")


def parameter_split(model: Any) -> dict[str, int]:
    """Parameters of the VLM (vision tower, projector, language model), the action expert and the projections."""
    inner = model.model
    dit = sum(p.numel() for p in inner.dit.parameters())
    unused = inner.dit.embed_tokens.weight.numel() if getattr(inner.dit, "embed_tokens", None) is not None else 0
    return {"vlm": sum(p.numel() for p in inner.vlm.parameters()), "dit": dit, "dit_unused_embed": unused,
            "projections": sum(p.numel() for n, p in model.named_parameters() if not n.startswith("model."))}


def describe_pi0(path: Path) -> str:
    """A few lines on a saved π0: its parameter split and how to load it."""
    from transformers import PI0Config, PI0ForConditionalGeneration

    config = PI0Config.from_pretrained(path)
    with torch.device("meta"):
        split = parameter_split(PI0ForConditionalGeneration(config))
    return (f"wrote {path}: PI0ForConditionalGeneration, VLM {split['vlm'] / 1e6:.2f}M, action expert "
            f"{split['dit'] / 1e6:.2f}M, projections {split['projections'] / 1e6:.3f}M; chunk {config.chunk_size}, "
            f"max action/state dims {config.max_action_dim}/{config.max_state_dim}\n"
            f"load it with transformers.PI0ForConditionalGeneration.from_pretrained({str(path)!r}), "
            f"or set policy.type: pi0 and policy.model_path: {path}")

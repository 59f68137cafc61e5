"""Where a π0.5 comes from: a LeRobot π0.5 folder, a folder this policy saved, or a tiny one built offline.

    from embodied.policies.pi05.pretrained import build_tiny_pi05, load_pi05
    build_tiny_pi05("runs/pi05-tiny")                   # tokenizer + random weights, save_pretrained
    model, tokenizer, source = load_pi05(Path("runs/pi05-tiny"), torch.float32, tokenizer_path=None)

A **LeRobot** π0.5 folder (``lerobot/pi05_base``, ``pi05_libero_base``, ``pi05_libero_finetuned``, ``pi05_droid``)
holds ``model.safetensors`` in LeRobot's key layout and LeRobot's ``config.json`` (``"type": "pi05"``). Its
sizes are read off its weights as π0's are (``policies/pi0/pretrained.py``), and its keys are renamed here
(:data:`RENAMES`): ``paligemma_with_expert.paligemma.model`` -> ``model.vlm`` (SigLIP's ``vision_model``
flattened), ``paligemma_with_expert.gemma_expert.model`` -> ``model.dit`` (its lm_head -> the unused
``dit.embed_tokens``), ``action_in_proj`` / ``time_mlp_*`` -> ``embed_action_time.*``. As LeRobot loads it:
``action_time_mlp_*`` (older folders) is ``time_mlp_*``; the VLM's embedding is ``embed_tokens`` when the folder
has one, else its ``lm_head``. LeRobot ships no tokenizer: give ``policy.tokenizer_path`` (PaliGemma's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from embodied.policies.pi0.folders import is_lerobot_config, read_config_json
from embodied.policies.pi0.pretrained import WEIGHTS, lerobot_pi0_config, tiny_pi0_config, weight_shapes
from embodied.policies.pi0.pretrained import parameter_split as pi0_parameter_split
from embodied.policies.pi05.configuration import TINY_NAMES, pi05_folder_problem
from embodied.policies.transformers_base import folders
from embodied.policies.transformers_base.tiny import save_tiny, train_tokenizer

TINY_CACHE = "tiny-pi05-v2"  # v2: the adaRMS gates open (build_tiny_pi05); v1 folders hold LeRobot's init
VLM_EMBED = "model.vlm.language_model.embed_tokens.weight"
RENAMES = [
    (r"^model\.", ""),  # LeRobot saves some folders with the policy's own "model." prefix
    (r"^action_time_mlp_(in|out)\.", r"time_mlp_\1."),  # older π0.5 folders (LeRobot's _fix_pytorch_state_dict_keys)
    (r"^paligemma_with_expert\.paligemma\.lm_head\.", "lm_head."),
    (r"^paligemma_with_expert\.paligemma\.model\.", "model.vlm."),
    (r"^paligemma_with_expert\.gemma_expert\.lm_head\.", "model.dit.embed_tokens."),
    (r"^paligemma_with_expert\.gemma_expert\.model\.", "model.dit."),
    (r"^(action_in_proj|time_mlp_in|time_mlp_out)\.", r"embed_action_time.\1."),
    (r"vision_tower\.vision_model\.", "vision_tower."),
]
# LeRobot drops these when it loads a π0.5 (a π0's state_proj; plain expert norms where adaRMS has dense).
DROPPED = re.compile(r"^state_proj\.|^model\.dit\.(layers\.\d+\.(input|post_attention)_layernorm|norm)\.weight$")


def lerobot_key(key: str) -> str:
    for pattern, target in RENAMES:
        key = re.sub(pattern, target, key)
    return key


def lerobot_pi05_config(lerobot: dict[str, Any], shapes: dict[str, tuple[int, ...]] | None = None,
                        where: str = "policy.model_path") -> Any:
    """A ``PI05Config`` from a LeRobot π0.5 ``config.json`` and its weights' shapes (π0's translation: the same
    variants, sizes read off the same key layout)."""
    return as_pi05_config(lerobot_pi0_config(lerobot, shapes, where))


def as_pi05_config(pi0_config: Any) -> Any:
    """The ``PI05Config`` of a ``PI0Config``'s sizes and flow settings."""
    from embodied.policies.pi05.model import PI05Config

    d = pi0_config.to_dict()
    keep = ("vlm_config", "dit_config", "chunk_size", "max_state_dim", "max_action_dim", "num_inference_steps",
            "time_sampling_beta_alpha", "time_sampling_beta_beta", "time_sampling_scale", "time_sampling_offset",
            "min_period", "max_period")
    return PI05Config(**{k: d[k] for k in keep if k in d})


def load_lerobot_weights(model: Any, path: Path) -> None:
    """LeRobot's tensors under our names into ``model``; anything missing or left over is named with the folder."""
    from safetensors.torch import load_file

    theirs = {lerobot_key(k): v for k, v in load_file(str(path / WEIGHTS)).items()}
    head = theirs.pop("lm_head.weight", None)  # π0.5 reads no VLM head: it stands in for a missing embedding only
    if VLM_EMBED not in theirs and head is not None:
        theirs[VLM_EMBED] = head
    theirs = {k: v for k, v in theirs.items() if not DROPPED.match(k)}
    mine = model.state_dict()
    unexpected = sorted(set(theirs) - set(mine))
    missing = sorted(set(mine) - set(theirs) - {"model.dit.embed_tokens.weight"})
    if unexpected or missing:
        raise ValueError(f"policy.model_path: {str(path)!r}: not a LeRobot π0.5's key layout: "
                         f"{len(missing)} tensors missing ({', '.join(missing[:3])}), {len(unexpected)} unexpected "
                         f"({', '.join(unexpected[:3])})")
    shapes = [k for k, v in theirs.items() if tuple(v.shape) != tuple(mine[k].shape)]
    if shapes:
        raise ValueError(f"policy.model_path: {str(path)!r}: {shapes[0]} is {tuple(theirs[shapes[0]].shape)}, "
                         f"the config makes it {tuple(mine[shapes[0]].shape)}")
    model.load_state_dict(theirs, strict=False)


def load_pi05(path: Path, dtype: torch.dtype, tokenizer_path: str | None) -> tuple[Any, Any, str]:
    """(PI05ForConditionalGeneration, tokenizer, "transformers" or "LeRobot") from a model folder."""
    from embodied.policies.pi05.model import PI05ForConditionalGeneration

    problem, _ = pi05_folder_problem(path)  # a π0 (or another policy's) folder is named before any weight is read
    if problem:
        raise ValueError(problem)
    lerobot = is_lerobot_config(read_config_json(path) or {})
    try:
        if lerobot:
            config = lerobot_pi05_config(read_config_json(path) or {}, weight_shapes(path))
            model = PI05ForConditionalGeneration(config)
            load_lerobot_weights(model, path)
            model = model.to(dtype)
        else:
            model = PI05ForConditionalGeneration.from_pretrained(path, dtype=dtype)
    except (OSError, KeyError) as exc:
        raise ValueError(f"policy.model_path: {str(path)!r} does not load as a π0.5: {exc}") from None
    tokenizer = folders.load_tokenizer(path, tokenizer_path, hint=" (a LeRobot folder has none: set "
                                                                   "policy.tokenizer_path to PaliGemma's)")
    vocab = model.config.vlm_config.text_config.vocab_size
    if len(tokenizer) > vocab:
        where = "policy.tokenizer_path" if tokenizer_path else "policy.model_path"
        raise ValueError(f"{where}: the tokenizer of {str(tokenizer_path or path)!r} has {len(tokenizer)} ids, more "
                         f"than the vocabulary of {vocab} embeddings in {str(path)!r} (another model's tokenizer?)")
    return model, tokenizer, "LeRobot" if lerobot else "embodied"


# -- tiny, offline ----------------------------------------------------------------------------


def build_tiny_pi05(out_dir: str | Path, seed: int = 0) -> Path:
    """Tokenizer trained on the task texts + random-weight tiny π0.5 (π0-tiny's sizes), saved atomically. Its
    adaRMS gates start open (``open_adaptive_gates``): it is built to be trained from scratch."""
    from embodied.policies.pi05.model import PI05ForConditionalGeneration, open_adaptive_gates

    folders.quiet_transformers()
    tokenizer = train_tokenizer("paligemma")
    tokenizer.bos_token = "<bos>"
    with torch.random.fork_rng(devices=[]):  # building on first use leaves the caller's random stream as it was
        torch.manual_seed(seed)
        model = PI05ForConditionalGeneration(as_pi05_config(tiny_pi0_config(tokenizer)))
    open_adaptive_gates(model)
    return save_tiny(out_dir, model, tokenizer)


def resolve_model_path(model_path: str) -> Path:
    """A local folder for ``policy.model_path``; ``tiny:pi05-tiny`` is built into the cache once."""
    return folders.resolve_model_path(model_path, TINY_CACHE, TINY_NAMES, lambda path, _: build_tiny_pi05(path),
                                      "π0.5")


def parameter_split(model: Any) -> dict[str, int]:
    """π0's split, with the action expert's adaRMS dense layers counted apart."""
    adarms = sum(p.numel() for n, p in model.model.dit.named_parameters() if ".dense." in n or n.startswith("norm."))
    return pi0_parameter_split(model) | {"dit_adarms": adarms}


def describe_pi05(path: Path) -> str:
    """A few lines on a saved π0.5: its parameter split and how to load it."""
    from embodied.policies.pi05.model import PI05Config, PI05ForConditionalGeneration

    config = PI05Config.from_pretrained(path)
    with torch.device("meta"):
        split = parameter_split(PI05ForConditionalGeneration(config))
    return (f"wrote {path}: π0.5 (PI05ForConditionalGeneration), VLM {split['vlm'] / 1e6:.2f}M, action expert "
            f"{split['dit'] / 1e6:.2f}M (adaRMS {split['dit_adarms'] / 1e6:.3f}M), projections "
            f"{split['projections'] / 1e6:.3f}M; chunk {config.chunk_size}\n"
            f"set policy.type: pi05 and policy.model_path: {path}")


def make_tiny(out_dir: str | Path, name: str, seed: int = 0) -> str:
    """``embodied make-tiny-vla --backbone pi05-tiny``: the tiny π0.5 in ``out_dir``; what was written."""
    return describe_pi05(build_tiny_pi05(out_dir, seed))

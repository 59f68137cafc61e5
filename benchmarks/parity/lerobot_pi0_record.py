"""Record LeRobot's own π0 actions for tiny π0 folders that LeRobot builds and saves (run in LeRobot's venv).

Not part of `make test`, and never imported by `embodied`: it runs in a venv of its own with ``lerobot==0.6.1``
(Python 3.12), which cannot sit beside our stack. How to make that venv, and the whole round trip, is in
``benchmarks/parity/README.md``::

    lerobot-venv/bin/python benchmarks/parity/lerobot_pi0_record.py --tokenizer OUT/tokenizer --out OUT

For each case of ``CASES`` it builds a ``lerobot.policies.pi0.PI0Policy`` with LeRobot's classes (shrunk to a few
hundred thousand parameters by swapping the Gemma and SigLIP sizes LeRobot hard-codes, nothing else), perturbs
its weights, saves it with LeRobot's ``save_pretrained`` and its pre/post-processor pipelines beside it (mean/std
statistics, the tokenizer step), loads the folder back with LeRobot's own ``from_pretrained``, and runs its
pipeline on fixed raw observations and a fixed initial noise. ``OUT/<case>/`` then holds the LeRobot folder as
LeRobot wrote it, ``case.json`` (the instructions, the env's cameras for the folder's cameras, the settings) and
``reference.safetensors``: the raw inputs (uint8 images, states, noise) and each stage LeRobot computed: prompt
tokens, image tensors, normalised padded state, prefix embeddings, the first Euler step's velocity, the
normalised chunk and the env actions.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

# The cases vary what a user's folder varies: tied or untied (fine-tuned) token embeddings, images that need no
# resize, integral and non-integral downscales, a camera the env lacks, instructions LeRobot does not clean,
# chunk and executed lengths, and an instruction longer than the tokenizer length (LeRobot truncates).
CLEAN = ["pick up the red block", "open the top drawer"]
CASES = [
    dict(name="tied_no_resize", tied=True, cameras=["main_images"], sizes=[(56, 56)], tasks=CLEAN),
    dict(name="untied_no_resize", tied=False, cameras=["main_images"], sizes=[(56, 56)], tasks=CLEAN),
    dict(name="untied_two_cameras_integral", tied=False, cameras=["main_images", "wrist_images"],
         sizes=[(112, 112), (224, 168)], tasks=CLEAN),
    dict(name="untied_non_integral_ratios", tied=False, cameras=["main_images", "wrist_images"],
         sizes=[(130, 97), (60, 106)], tasks=CLEAN),
    dict(name="untied_empty_camera", tied=False, cameras=["main_images", "wrist_images", "empty"],
         sizes=[(64, 64), (56, 56)], tasks=CLEAN),
    dict(name="untied_raw_instructions", tied=False, cameras=["main_images"], sizes=[(70, 90)],
         tasks=["pick_up the red_block", "  open the top drawer ", "put it in the basket\n\n"]),
    dict(name="untied_long_chunk", tied=False, cameras=["main_images"], sizes=[(60, 50)], tasks=CLEAN,
         chunk_size=50, n_action_steps=50, state_dim=8, action_dim=7),
    dict(name="untied_truncated_instruction", tied=False, cameras=["main_images"], sizes=[(56, 56)],
         tasks=["pick up the red block and then put it down in the basket next to the blue block on the table"],
         tokenizer_max_length=12),
]
DEFAULTS = dict(chunk_size=10, n_action_steps=5, state_dim=6, action_dim=4, tokenizer_max_length=48,
                num_inference_steps=4, resolution=56)
FOLDER_KEYS = {"main_images": "observation.images.base_0_rgb", "wrist_images": "observation.images.left_wrist_0_rgb",
               "empty": "observation.images.right_wrist_0_rgb"}


def shrink_lerobot_pi0(vocab: int, m=None) -> None:
    """Tiny Gemma and SigLIP sizes in place of the ones LeRobot's π0 (or the modeling module ``m``: π0.5's)
    hard-codes (8 heads stay: its fused attention reshapes by them)."""
    if m is None:
        from lerobot.policies.pi0 import modeling_pi0 as m

    sizes = {"gemma_2b": m.GemmaConfig(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=8),
             "gemma_300m": m.GemmaConfig(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=8)}
    m.get_gemma_config = sizes.__getitem__
    paligemma, expert = m.PaliGemmaForConditionalGenerationWithPiGemma, m.PiGemmaForCausalLM

    def tiny_paligemma(config):
        vision = config.vision_config
        vision.hidden_size, vision.intermediate_size, vision.num_hidden_layers = 64, 96, 1
        vision.projection_dim = config.text_config.hidden_size
        config.text_config.vocab_size = vocab
        config._vocab_size = vocab  # noqa: SLF001
        return paligemma(config=config)

    def tiny_expert(config):
        config.vocab_size = vocab
        return expert(config=config)

    m.PaliGemmaForConditionalGenerationWithPiGemma = tiny_paligemma
    m.PiGemmaForCausalLM = tiny_expert


def offline_tokenizer(folder: Path) -> None:
    """LeRobot's tokenizer step asks the hub for PaliGemma's tokenizer by name; give it the local one."""
    from lerobot.processor import tokenizer_processor
    from transformers import AutoTokenizer

    local = AutoTokenizer.from_pretrained(folder)

    class Local:
        @staticmethod
        def from_pretrained(name, *args, **kwargs):
            return local

    tokenizer_processor.AutoTokenizer = Local


def build_and_save(case: dict, folder: Path, seed: int) -> None:
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.policies.pi0 import PI0Config, PI0Policy
    from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors

    r = case["resolution"]
    inputs = {FOLDER_KEYS[c]: PolicyFeature(type=FeatureType.VISUAL, shape=(3, r, r)) for c in case["cameras"]}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case["state_dim"],))
    config = PI0Config(input_features=inputs,
                       output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(case["action_dim"],))},
                       chunk_size=case["chunk_size"], n_action_steps=case["n_action_steps"],
                       num_inference_steps=case["num_inference_steps"], image_resolution=(r, r),
                       tokenizer_max_length=case["tokenizer_max_length"], device="cpu", push_to_hub=False)
    torch.manual_seed(seed)
    policy = PI0Policy(config)
    with torch.no_grad():
        for p in policy.parameters():  # norms and biases start at constants: move every weight off its init
            p.add_(0.05 * torch.randn_like(p))
        pg = policy.model.paligemma_with_expert.paligemma
        if case["tied"]:  # a base checkpoint: the head holds the embedding's values (two tensors, both saved)
            pg.lm_head.weight.copy_(pg.model.language_model.embed_tokens.weight)
    gen = torch.Generator().manual_seed(seed + 1)
    stats = {"observation.state": {"mean": torch.randn(case["state_dim"], generator=gen),
                                   "std": 0.5 + torch.rand(case["state_dim"], generator=gen)},
             "action": {"mean": torch.randn(case["action_dim"], generator=gen),
                        "std": 0.5 + torch.rand(case["action_dim"], generator=gen)}}
    pre, post = make_pi0_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)


def record(case: dict, folder: Path, seed: int, policy_class=None) -> dict[str, torch.Tensor]:
    """Load the folder with LeRobot's own loaders (``policy_class``: π0's, or π0.5's) and run its pipeline, keeping
    every stage. The state stage is π0's ``prepare_state`` (padded), or the normalised state the pre-processor gives
    a policy without one (π0.5 writes it into the prompt)."""
    from lerobot.processor import (PolicyProcessorPipeline, batch_to_transition, policy_action_to_transition,
                                   transition_to_batch, transition_to_policy_action)

    if policy_class is None:
        from lerobot.policies.pi0 import PI0Policy as policy_class
    policy = policy_class.from_pretrained(folder)
    # As lerobot.policies.factory.make_pre_post_processors loads a pretrained folder's pipelines.
    pre = PolicyProcessorPipeline.from_pretrained(folder, config_filename="policy_preprocessor.json",
                                                  to_transition=batch_to_transition, to_output=transition_to_batch)
    post = PolicyProcessorPipeline.from_pretrained(folder, config_filename="policy_postprocessor.json",
                                                   to_transition=policy_action_to_transition,
                                                   to_output=transition_to_policy_action)
    gen = torch.Generator().manual_seed(seed + 2)
    batch_size = len(case["tasks"])
    ref: dict[str, torch.Tensor] = {}
    batch: dict = {"task": list(case["tasks"])}
    for camera, (h, w) in zip(case["cameras"], case["sizes"]):
        if camera == "empty":
            continue
        raw = torch.randint(0, 256, (batch_size, h, w, 3), dtype=torch.uint8, generator=gen)
        ref[f"input.{camera}"] = raw
        batch[FOLDER_KEYS[camera]] = raw.permute(0, 3, 1, 2).float() / 255.0  # as LeRobot's env processor
    ref["input.states"] = torch.randn(batch_size, case["state_dim"], generator=gen) * case.get("state_scale", 1.0)
    batch["observation.state"] = ref["input.states"].clone()
    noise = torch.randn(batch_size, case["chunk_size"], policy.config.max_action_dim, generator=gen)
    ref["input.noise"] = noise

    model = policy.model
    seen: dict[str, object] = {}

    def keep(name, owner, attribute):
        fn = getattr(owner, attribute)

        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            seen.setdefault(name, out)
            return out
        setattr(owner, attribute, wrapped)

    keep("images", policy, "_preprocess_images")
    if hasattr(policy, "prepare_state"):
        keep("state", policy, "prepare_state")
    keep("prefix", model, "embed_prefix")
    keep("velocity", model, "denoise_step")
    processed = pre(batch)
    chunk = policy.predict_action_chunk(processed, noise=noise.clone())
    actions = post(chunk)
    images, masks = seen["images"]
    embeds, pad_masks, _ = seen["prefix"]
    state = seen["state"] if "state" in seen else processed["observation.state"]
    ref |= {"stage.tokens": processed["observation.language.tokens"].long(),
            "stage.token_mask": processed["observation.language.attention_mask"].long(),
            "stage.images": torch.stack(images, 1).float(), "stage.image_mask": torch.stack(masks, 1).long(),
            "stage.state": state.float(), "stage.prefix": embeds.float(),
            "stage.prefix_mask": pad_masks.long(), "stage.velocity": seen["velocity"].float(),
            "stage.chunk": chunk.float(), "stage.actions": actions.float()}
    return {k: v.contiguous() for k, v in ref.items()}


def parse_args(doc: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="the tokenizer folder (parity_pi0.py tokenizer)")
    parser.add_argument("--out", type=Path, required=True, help="where each case's folder and references go")
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    return parser.parse_args()


def record_cases(args: argparse.Namespace, cases: list[dict], defaults: dict, build, run, meta_keys: tuple[str, ...],
                 extra: dict, seed_offset: int = 0) -> None:
    """Each case: ``build(case, folder, seed)`` saves LeRobot's folder, ``run(case, folder, seed)`` records its
    stages; ``OUT/<case>/`` gets the folder, ``reference.safetensors`` and ``case.json`` (``meta_keys`` of the case,
    ``extra`` and the versions)."""
    import lerobot
    import transformers
    from safetensors.torch import save_file

    torch.use_deterministic_algorithms(True)
    for index, spec in enumerate(cases):
        case = defaults | spec
        if args.only and case["name"] not in args.only:
            continue
        out = args.out / case["name"]
        shutil.rmtree(out, ignore_errors=True)
        folder = out / "lerobot"
        seed = 100 * index + seed_offset
        build(case, folder, seed=seed)
        ref = run(case, folder, seed=seed)
        save_file(ref, str(out / "reference.safetensors"))
        meta = {k: case[k] for k in meta_keys} | extra
        meta |= {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                 "numpy": np.__version__}
        (out / "case.json").write_text(json.dumps(meta, indent=1))
        print(f"{case['name']}: chunk {tuple(ref['stage.chunk'].shape)}, "
              f"{sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1e3:.0f} kB")


def main() -> None:
    args = parse_args(__doc__)
    from transformers import AutoTokenizer

    shrink_lerobot_pi0(len(AutoTokenizer.from_pretrained(args.tokenizer)))
    offline_tokenizer(args.tokenizer)
    record_cases(args, CASES, DEFAULTS, build_and_save, record, ("name", "tied", "cameras", "sizes", "tasks",
                                                                 "chunk_size", "n_action_steps", "tokenizer_max_length"),
                 {})


if __name__ == "__main__":
    main()

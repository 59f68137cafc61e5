"""Record LeRobot's own π0.5 actions for tiny π0.5 folders that LeRobot builds and saves (run in LeRobot's venv).

Not part of `make test`, never imported by `embodied`: like ``lerobot_pi0_record.py`` (whose tokenizer patch and
shrinking it reuses), it runs in a venv of its own with ``lerobot==0.6.1``::

    lerobot-venv/bin/python benchmarks/parity/lerobot_pi05_record.py --tokenizer OUT/tokenizer --out OUT

For each case of ``CASES`` it builds a ``lerobot.policies.pi05.PI05Policy`` with LeRobot's classes (Gemma and
SigLIP sizes shrunk, nothing else), perturbs every weight (the adaRMS ``dense`` layers too), saves it with
LeRobot's ``save_pretrained`` and its pre/post-processors (quantile or mean/std statistics, the discrete-state
prompt, the tokenizer step), loads the folder back with LeRobot's ``from_pretrained``, and runs its pipeline on
fixed raw observations and noise. ``OUT/<case>/`` holds the folder, ``case.json`` and ``reference.safetensors``:
the raw inputs and each stage LeRobot computed (prompt tokens, image tensors, normalised state, prefix embeddings,
the first Euler step's velocity, the normalised chunk, the env actions).
"""

from __future__ import annotations

from pathlib import Path

import torch
from lerobot_pi0_record import FOLDER_KEYS, offline_tokenizer, parse_args, record, record_cases, shrink_lerobot_pi0

# The cases vary what a π0.5 folder varies: quantile or mean/std statistics, images with no resize and with
# non-integral downscales, LIBERO's empty camera with n_action_steps 10 of 50, tasks LeRobot cleans, states
# outside [-1, 1] after normalisation (bins -1 and 255), a folder whose VLM embedding is its lm_head only.
CLEAN = ["pick up the red block", "open the top drawer"]
CASES = [
    dict(name="quantiles_no_resize", cameras=["main_images"], sizes=[(56, 56)], tasks=CLEAN),
    dict(name="quantiles_non_integral_raw_tasks_wide_states", cameras=["main_images", "wrist_images"],
         sizes=[(130, 97), (60, 106)], state_scale=3.0,
         tasks=["pick_up the red_block", "  open the top drawer ", "put it in the basket\n\n"]),
    dict(name="quantiles_libero_empty_camera", cameras=["main_images", "wrist_images"], empty_cameras=1,
         sizes=[(64, 64), (56, 56)], tasks=CLEAN, chunk_size=50, n_action_steps=10, state_dim=8, action_dim=7),
    dict(name="mean_std_lm_head_only", cameras=["main_images"], sizes=[(70, 90)], tasks=CLEAN, mode="MEAN_STD",
         drop_embedding=True),
]
DEFAULTS = dict(chunk_size=10, n_action_steps=5, state_dim=6, action_dim=4, tokenizer_max_length=200,
                num_inference_steps=4, resolution=56, empty_cameras=0, mode="QUANTILES", state_scale=1.0,
                drop_embedding=False)
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"


def statistics(case: dict, gen: torch.Generator) -> dict:
    def pair(n: int) -> dict[str, torch.Tensor]:
        lo = torch.randn(n, generator=gen)
        hi = lo + 0.5 + torch.rand(n, generator=gen)
        return {"q01": lo, "q99": hi, "mean": (lo + hi) / 2, "std": (hi - lo) / 2, "min": lo - 1, "max": hi + 1}
    return {"observation.state": pair(case["state_dim"]), "action": pair(case["action_dim"])}


def build_and_save(case: dict, folder: Path, seed: int) -> dict:
    from lerobot.configs import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.pi05 import PI05Config, PI05Policy
    from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors

    r = case["resolution"]
    inputs = {FOLDER_KEYS[c]: PolicyFeature(type=FeatureType.VISUAL, shape=(3, r, r)) for c in case["cameras"]}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case["state_dim"],))
    mode = NormalizationMode(case["mode"])
    config = PI05Config(input_features=inputs,
                        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(case["action_dim"],))},
                        chunk_size=case["chunk_size"], n_action_steps=case["n_action_steps"],
                        num_inference_steps=case["num_inference_steps"], image_resolution=(r, r),
                        tokenizer_max_length=case["tokenizer_max_length"], empty_cameras=case["empty_cameras"],
                        normalization_mapping={"VISUAL": NormalizationMode.IDENTITY, "STATE": mode, "ACTION": mode},
                        device="cpu", push_to_hub=False)
    torch.manual_seed(seed)
    policy = PI05Policy(config)
    with torch.no_grad():
        for p in policy.parameters():  # norms, biases and the zero adaRMS dense start at constants: move them all
            p.add_(0.05 * torch.randn_like(p))
    stats = statistics(case, torch.Generator().manual_seed(seed + 1))
    pre, post = make_pi05_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)
    if case["drop_embedding"]:  # an openpi conversion: the VLM's embedding only as its lm_head
        from safetensors.torch import load_file, save_file

        weights = load_file(str(folder / "model.safetensors"))
        key = next(k for k in weights if k.removeprefix("model.") == EMBED)
        weights.pop(key)
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return stats


def main() -> None:
    args = parse_args(__doc__)
    from lerobot.policies.pi05 import PI05Policy, modeling_pi05
    from transformers import AutoTokenizer

    shrink_lerobot_pi0(len(AutoTokenizer.from_pretrained(args.tokenizer)), modeling_pi05)
    offline_tokenizer(args.tokenizer)
    record_cases(args, CASES, DEFAULTS, build_and_save, lambda case, folder, seed: record(case, folder, seed, PI05Policy),
                 ("name", "cameras", "sizes", "tasks", "chunk_size", "n_action_steps", "tokenizer_max_length",
                  "empty_cameras", "mode", "drop_embedding"), {"policy": "pi05"}, seed_offset=7)


if __name__ == "__main__":
    main()

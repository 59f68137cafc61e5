"""Our π0 against LeRobot's own, stage by stage, on folders LeRobot built and saved (``lerobot_pi0_record.py``).

    python -m benchmarks.parity.parity_pi0 tokenizer OUT/tokenizer        # 1. the tokenizer both sides use
    lerobot-venv/bin/python benchmarks/parity/lerobot_pi0_record.py \\
        --tokenizer OUT/tokenizer --out OUT                               # 2. LeRobot builds, saves and acts
    python -m benchmarks.parity.parity_pi0 check OUT [--store tests/policies/parity/pi0]   # 3. we act, compare

``check`` loads each LeRobot folder as a user would (``policy.type: pi0``, ``policy.model_path`` the folder,
``policy.tokenizer_path`` the tokenizer, every other setting read from the folder), feeds it the raw observations
and noise LeRobot got, and compares each stage LeRobot recorded: the prompt's tokens, the image tensors, the
normalised padded state, the prefix embeddings (on the positions both attend to), the first Euler step's velocity,
the normalised chunk and the env actions. It prints a table (max |difference| per stage, the first stage over the
tolerance) and exits 1 when a case misses it. ``--store`` copies the cases (LeRobot's folder, the references) and
the tokenizer where ``tests/policies/test_pi0_parity.py`` checks them on every commit. See README.md here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

TOLERANCE = 1e-4
STAGES = ("tokens", "images", "state", "prefix", "velocity", "chunk", "actions")


def make_tokenizer(out: Path) -> Path:
    """Our tiny PaliGemma-style tokenizer, adding ``<bos>`` itself as PaliGemma's does."""
    from tokenizers import processors

    from embodied.policies.vla.tiny import train_tokenizer

    tokenizer = train_tokenizer("paligemma")
    tokenizer.bos_token = "<bos>"
    bos = tokenizer.convert_tokens_to_ids("<bos>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", bos)])
    tokenizer.save_pretrained(out)
    return out


@dataclass
class CaseResult:
    name: str
    differences: dict[str, float]  # stage -> max |ours - LeRobot's|

    @property
    def first_differing(self) -> str | None:
        return next((s for s in STAGES if self.differences.get(s, 0.0) > TOLERANCE), None)


def build_policy(case_dir: Path, tokenizer: Path, meta: dict, ref: dict[str, torch.Tensor], config_class=None,
                 policy_class=None):
    """Our π0 (or ``policy_class`` of ``config_class``: π0.5's) on the case's LeRobot folder, configured as a YAML
    ``policy:`` section naming only the folder and the tokenizer would be (everything else from the folder, through
    the config loader's ``folder_defaults``)."""
    from embodied.policies.pi0.configuration import PI0PolicyConfig
    from embodied.policies.pi0.modeling import PI0Policy
    from embodied.policy.base import PolicySpec

    config_class, policy_class = config_class or PI0PolicyConfig, policy_class or PI0Policy
    section = {"type": config_class.type, "model_path": str(case_dir / "lerobot"), "tokenizer_path": str(tokenizer)}
    known = {f.name for f in fields(config_class)}
    config = config_class(**{k: v for k, v in {**config_class.folder_defaults(section), **section}.items()
                             if k in known})
    main, wrist = ref["input.main_images"], ref.get("input.wrist_images")
    action_dim = ref["stage.actions"].shape[-1]
    spec = PolicySpec(state_dim=ref["input.states"].shape[1], image_shape=tuple(main.shape[1:]), action_dim=action_dim,
                      action_low=(-1.0,) * action_dim, action_high=(1.0,) * action_dim,
                      wrist_image_shape=None if wrist is None else tuple(wrist.shape[1:]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the folder's lm_head / embed_tokens warning is the point of one case
        return policy_class(config, spec)


@torch.no_grad()
def our_stages(policy, meta: dict, ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each stage as our policy computes it, in LeRobot's layout where they differ (see ``compare``)."""
    from embodied.policies.flow_logprob import sample_chain

    obs = {k.removeprefix("input."): v.numpy() for k, v in ref.items() if k.startswith("input.") and "noise" not in k}
    obs["task_descriptions"] = list(meta["tasks"])
    inputs = policy.forward_inputs(obs)
    p = policy._prompt_inputs(inputs)  # noqa: SLF001
    images = p["pixel_values"].shape[1] * policy.inputs.tokens_per_image
    embeds = policy.model.model.embed_prefix(p["input_ids"], p["pixel_values"], p["pixel_attention_mask"])
    prefix = policy._prefix(inputs)  # noqa: SLF001
    noise = ref["input.noise"]
    t = torch.ones(noise.shape[0])
    velocity, _ = policy._velocity(prefix)(noise.to(policy.dtype_), t, 1)  # noqa: SLF001
    chain = sample_chain(policy._velocity(prefix), noise.clone(), policy.steps, policy.logprob, True,  # noqa: SLF001
                         policy.scored)
    return {"tokens": p["input_ids"][:, images:], "token_mask": p["attention_mask"][:, images:],
            "images": p["pixel_values"].float(), "state": prefix.state.float(), "prefix": embeds.float(),
            "prefix_mask": p["attention_mask"], "velocity": velocity.float(), "chunk": chain.actions.float(),
            "actions": policy.env_actions(chain.actions).float(), "chunk_len": policy.chunk}


def _valid_rows(x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    return [row[m.bool()] for row, m in zip(x, mask)]


def compare(ours: dict, ref: dict[str, torch.Tensor], meta: dict) -> dict[str, float]:
    """Max |difference| per stage; a stage whose shapes or tokens differ counts as inf."""
    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).abs().max()) if a.shape == b.shape else float("inf")

    d: dict[str, float] = {}
    theirs_tokens = _valid_rows(ref["stage.tokens"], ref["stage.token_mask"])
    mine_tokens = _valid_rows(ours["tokens"], ours["token_mask"])
    d["tokens"] = 0.0 if all(torch.equal(a, b) for a, b in zip(mine_tokens, theirs_tokens)) else float("inf")
    present = ref["stage.image_mask"][0].bool()  # LeRobot: the present cameras first, its empty ones after
    d["images"] = diff(ours["images"], ref["stage.images"][:, present])
    d["state"] = diff(ours["state"], ref["stage.state"])
    rows = zip(_valid_rows(ours["prefix"], ours["prefix_mask"]), _valid_rows(ref["stage.prefix"], ref["stage.prefix_mask"]))
    d["prefix"] = max(diff(a, b) for a, b in rows)
    d["velocity"] = diff(ours["velocity"], ref["stage.velocity"])
    c, a = ours["chunk_len"], ref["stage.actions"].shape[-1]
    if c != meta["n_action_steps"]:
        d["chunk"] = d["actions"] = float("inf")  # the folder's n_action_steps was not taken up
        return d
    d["chunk"] = diff(ours["chunk"][:, :c, :a], ref["stage.chunk"][:, :c])
    d["actions"] = diff(ours["actions"], ref["stage.actions"][:, :c])
    return d


def check_case(case_dir: Path, tokenizer: Path) -> CaseResult:
    from safetensors.torch import load_file

    meta = json.loads((case_dir / "case.json").read_text())
    ref = load_file(str(case_dir / "reference.safetensors"))
    policy = build_policy(case_dir, tokenizer, meta, ref)
    return CaseResult(meta["name"], compare(our_stages(policy, meta, ref), ref, meta))


def table(results: list[CaseResult]) -> str:
    head = "| case | " + " | ".join(STAGES) + " | first differing stage |"
    lines = [head, "|" + "---|" * (len(STAGES) + 2)]
    for r in results:
        cells = [f"{r.differences.get(s, float('nan')):.2g}" for s in STAGES]
        lines.append(f"| {r.name} | " + " | ".join(cells) + f" | {r.first_differing or '-'} |")
    return "\n".join(lines)


def store(out: Path, cases: list[Path], tokenizer: Path) -> None:
    """Copy the cases and the tokenizer where the tests read them (replacing what was there)."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tokenizer, out / "tokenizer")
    for case in cases:
        shutil.copytree(case, out / case.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tokenizer", help="write the tokenizer both sides use").add_argument("out", type=Path)
    check = sub.add_parser("check", help="compare our stages with LeRobot's recorded ones")
    check.add_argument("dir", type=Path, help="what lerobot_pi0_record.py wrote (its --out)")
    check.add_argument("--tokenizer", type=Path, help="default: DIR/tokenizer")
    check.add_argument("--store", type=Path, help="copy the cases and the tokenizer here (for the tests)")
    args = parser.parse_args(argv)
    if args.command == "tokenizer":
        print(f"wrote {make_tokenizer(args.out)}")
        return 0
    return check_dir(args.dir, args.tokenizer or args.dir / "tokenizer", args.store, check_case)


def check_dir(directory: Path, tokenizer: Path, store_to: Path | None, check) -> int:
    """``check(case_dir, tokenizer)`` on every recorded case: the table, then the store; 1 when a case misses."""
    torch.manual_seed(0)
    np.random.seed(0)
    cases = sorted(p.parent for p in directory.glob("*/case.json"))
    results = [check(case, tokenizer) for case in cases]
    print(table(results))
    print(f"tolerance {TOLERANCE:g}; LeRobot {json.loads((cases[0] / 'case.json').read_text())['lerobot']}")
    if store_to:
        store(store_to, cases, tokenizer)
        print(f"stored {len(cases)} cases in {store_to}")
    return int(any(r.first_differing for r in results))


if __name__ == "__main__":
    sys.exit(main())

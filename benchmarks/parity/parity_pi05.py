"""Our π0.5 against LeRobot's own, stage by stage, on folders LeRobot built and saved (``lerobot_pi05_record.py``).

    python -m benchmarks.parity.parity_pi0 tokenizer OUT/tokenizer        # 1. the tokenizer both sides use
    lerobot-venv/bin/python benchmarks/parity/lerobot_pi05_record.py \\
        --tokenizer OUT/tokenizer --out OUT                               # 2. LeRobot builds, saves and acts
    python -m benchmarks.parity.parity_pi05 check OUT [--store tests/policies/parity/pi05]   # 3. we act, compare

As ``parity_pi0.py`` (whose stages, comparison, table and store this reuses): each LeRobot folder is loaded as a
user would (``policy.type: pi05``, ``policy.model_path``, ``policy.tokenizer_path``, everything else from the
folder), fed the raw observations and noise LeRobot got, and compared stage by stage: the prompt's tokens (the
discretised state in them), the image tensors, the normalised state, the prefix embeddings, the first Euler
step's velocity, the normalised chunk and the env actions. Exits 1 when a case misses the tolerance (1e-4).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks.parity.parity_pi0 import TOLERANCE, CaseResult, build_policy, check_dir, compare, our_stages


def check_case(case_dir: Path, tokenizer: Path) -> CaseResult:
    from safetensors.torch import load_file

    meta = json.loads((case_dir / "case.json").read_text())
    ref = load_file(str(case_dir / "reference.safetensors"))
    from embodied.policies.pi05.configuration import PI05PolicyConfig
    from embodied.policies.pi05.modeling import PI05Policy

    policy = build_policy(case_dir, tokenizer, meta, ref, PI05PolicyConfig, PI05Policy)
    with torch.no_grad():
        ours = our_stages(policy, meta, ref)
        ours["state"] = policy.normalized_state(ref["input.states"].numpy())  # π0.5's: into the prompt, unpadded
    return CaseResult(meta["name"], compare(ours, ref, meta))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["check"])
    parser.add_argument("dir", type=Path, help="what lerobot_pi05_record.py wrote (its --out)")
    parser.add_argument("--tokenizer", type=Path, help="default: DIR/tokenizer")
    parser.add_argument("--store", type=Path, help="copy the cases and the tokenizer here (for the tests)")
    args = parser.parse_args(argv)
    return check_dir(args.dir, args.tokenizer or args.dir / "tokenizer", args.store, check_case)

if __name__ == "__main__":
    sys.exit(main())

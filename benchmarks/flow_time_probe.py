"""Does a π0-family policy use its flow time? Held-out flow loss at fixed times, told the true time or a wrong one.

    python benchmarks/flow_time_probe.py configs/pick_color_pi05tiny_sft.yaml --dataset data/pick_color_home8k \
        --checkpoint runs/pick_color_pi05tiny_sft-<stamp>

π0 and π0.5 (``policy.type: pi0`` / ``pi05``) predict the velocity ``noise - action`` from the noisy chunk
``x_t = t * noise + (1 - t) * action`` and the time ``t``. For each fixed ``t`` the probe mixes ``x_t`` with the
true ``t`` and reports the masked flow loss (``Policy.supervised_loss``, the loss SFT minimises) three ways: the
model told the true ``t``, told ``t = 0.5``, and told a time drawn at random per sample. The noise is the same in
all three. A model that ignores its time scores the same in each column; the ratio of the wrong columns to the
true one is how much it leans on the time. π0 adds the time to every action token; π0.5 reads it only through
its adaRMS modulation, whose ``dense`` weights a tiny π0.5 starts at zero, so a fresh one ignores it exactly.

Episodes are split as ``embodied sft`` splits them (``sft.val_fraction``, seed); the held-out rows are probed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

if __package__ in (None, ""):  # run as a script: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.first_chunk_probe import probe_parser, probed_policy  # noqa: E402
from embodied.config import load_config  # noqa: E402
from embodied.data import DemoDataset, collate  # noqa: E402
from embodied.policy.base import Policy  # noqa: E402
from embodied.runs.sft import split_by_episode  # noqa: E402

TIMES = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 0.999)
TOLD = ("true t", "told 0.5", "told a random t")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = probe_parser(__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=256, help="held-out rows probed (most)")
    p.add_argument("--times", type=float, nargs="+", default=list(TIMES), help="flow times, 0 (data) to 1 (noise)")
    return p.parse_args(argv)


@torch.no_grad()
def flow_loss_at(policy: Policy, batches: list, t: float, told: str, seed: int) -> float:
    """The held-out flow loss with ``x_t`` mixed at ``t`` and the model told ``told`` (one of ``TOLD``)."""
    model = policy.model
    embed = model.embed_action_time
    forward, embed_forward = model.forward, embed.forward
    lies = torch.Generator().manual_seed(seed + 1)  # the random times: apart from the noise's generator
    total, count = 0.0, 0
    try:
        for obs, actions, executed in batches:
            n = len(actions)
            true = torch.full((n,), t)
            shown = {"true t": true, "told 0.5": torch.full((n,), 0.5),
                     "told a random t": torch.rand(n, generator=lies)}[told]
            # Instance attributes shadow the methods for this batch: x_t is mixed at `true`, the time read is `shown`
            model.forward = lambda *a, _t=true, **k: forward(*a, timestep=_t.to(policy.device_), **k)
            embed.forward = lambda state, x, _, _s=shown: embed_forward(state, x, _s.to(x.device))
            torch.manual_seed(seed)  # the same noise whatever the model is told
            total += float(policy.supervised_loss(policy.forward_inputs(obs), actions, executed)) * n
            count += n
            seed += 1
    finally:
        vars(model).pop("forward", None), vars(embed).pop("forward", None)  # the class's methods again
    return total / count


def main(argv: list[str] | None = None) -> dict[float, dict[str, float]]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    data = DemoDataset(args.dataset)
    policy = probed_policy(cfg, data, args.checkpoint)
    if not hasattr(getattr(policy, "model", None), "embed_action_time"):
        raise SystemExit(f"{args.config}: policy.type {cfg.policy.type!r} has no π0-family flow model "
                         "(the probe reads policy.type pi0 or pi05)")
    policy.eval()
    _, held = split_by_episode(data, cfg.sft.val_fraction, cfg.experiment.seed)
    rows = list(held.indices)[: args.rows] or list(range(min(len(data), args.rows)))  # no split: every row
    batches = [collate([data[int(i)] for i in rows[s:s + 64]]) for s in range(0, len(rows), 64)]
    print(f"{type(policy).__name__}, {len(rows)} held-out rows; flow loss at a fixed t, by what the model is told")
    print(f"{'t':>6}  " + "  ".join(f"{name:>15}" for name in TOLD) + "   wrong / true")
    result: dict[float, dict[str, float]] = {}
    for t in args.times:
        losses = {told: flow_loss_at(policy, batches, t, told, cfg.experiment.seed) for told in TOLD}
        result[t] = losses
        ratios = " / ".join(f"{losses[told] / losses['true t']:.2f}" for told in TOLD[1:])
        print(f"{t:>6}  " + "  ".join(f"{losses[told]:>15.4f}" for told in TOLD) + f"   {ratios}", flush=True)
    return result


if __name__ == "__main__":
    main()

"""Metrics to the console (progress bar), to ``metrics.jsonl`` in the run dir, and to wandb.

A sink that fails is reported once and switched off: a logging outage never stops training.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from tqdm import tqdm

from embodied.config import LoggerConfig

CONSOLE_KEYS = {"env/success_rate": "succ", "env/return": "ret", "eval/success_rate": "eval_succ",
                "env_steps_per_s": "sps", "train/approx_kl": "kl"}


class MetricLogger:
    """Fan-out of ``log(metrics, step)`` to the configured sinks."""

    def __init__(self, cfg: LoggerConfig, run_dir: Path, name: str, config: dict[str, Any], total: int) -> None:
        self.cfg = cfg
        self.jsonl = open(run_dir / "metrics.jsonl", "a")
        self.bar = tqdm(total=total, desc=name, unit="it", file=sys.stdout,
                        disable="console" not in cfg.backends or not cfg.progress_bar, dynamic_ncols=True)
        self.wandb = _init_wandb(cfg, run_dir, name, config) if "wandb" in cfg.backends else None

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self.jsonl.flush()
        if "console" in self.cfg.backends:
            self._console(metrics, step)
        if self.wandb is not None:
            try:
                self.wandb.log(metrics, step=step)
            except Exception as exc:  # noqa: BLE001 - an outage must not stop training
                warnings.warn(f"wandb logging failed, switching it off: {exc!r}")
                self.wandb = None

    def _console(self, metrics: dict[str, float], step: int) -> None:
        shown = {short: f"{metrics[k]:.3g}" for k, short in CONSOLE_KEYS.items() if k in metrics
                 and not math.isnan(metrics[k])}
        if self.bar.disable:
            print(f"it {step}: " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
        else:
            self.bar.set_postfix(shown, refresh=False)
            self.bar.update(step - self.bar.n)
        if "eval/success_rate" in metrics:
            line = " ".join(f"{k}={v:.3g}" for k, v in metrics.items() if k.startswith("eval/"))
            self.bar.write(f"[eval @ it {step}] {line}")

    def close(self) -> None:
        self.bar.close()
        self.jsonl.close()
        if self.wandb is not None:
            try:
                self.wandb.finish()
            except Exception as exc:  # noqa: BLE001
                warnings.warn(f"wandb finish failed: {exc!r}")


def _init_wandb(cfg: LoggerConfig, run_dir: Path, name: str, config: dict[str, Any]) -> Any:
    mode = os.environ.get("WANDB_MODE", cfg.wandb_mode)
    if mode == "disabled":
        return None
    try:
        import wandb

        return wandb.init(project=cfg.project, name=name, dir=str(run_dir), mode=mode, config=config,
                          reinit="finish_previous")
    except Exception as exc:  # noqa: BLE001 - no wandb is no reason to stop training
        warnings.warn(f"wandb could not start ({exc!r}); logging to console and metrics.jsonl only")
        return None

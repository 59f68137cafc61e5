"""``embodied`` command line: a thin layer over the config loader and the runner.

    embodied train configs/reach_mlp_ppo.yaml runner.iterations=50 cluster.backend=ray
    embodied list envs
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train an experiment from a YAML recipe")
    p_train.add_argument("config", help="path to a YAML recipe in configs/")
    p_train.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_list = sub.add_parser("list", help="list registered envs or policies")
    p_list.add_argument("what", choices=["envs", "policies"])
    args = parser.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    if args.command == "train":
        return _train(args.config, args.overrides)
    return _list(args.what)


def _train(path: str, overrides: list[str]) -> int:
    from embodied.config import ConfigError, load_config
    from embodied.runner import train

    try:
        cfg = load_config(path, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = train(cfg)
    ev = result.final_eval
    print(f"final eval: success_rate={ev.get('eval/success_rate', float('nan')):.3f} "
          f"return={ev.get('eval/return', float('nan')):.3f} over {int(ev.get('eval/episodes', 0))} episodes")
    print(f"run dir: {result.run_dir}\ncheckpoint: {result.checkpoint}")
    return 0


def _list(what: str) -> int:
    from embodied.registry import ENVS, POLICIES

    registry = ENVS if what == "envs" else POLICIES
    for name in registry.names():
        print(f"{name:24s} {registry.entry_point(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``embodied`` command line: a thin layer over the config loader, the runner and evaluation.

    embodied train configs/reach_mlp_ppo.yaml runner.iterations=50 cluster.backend=ray
    embodied train configs/reach_mlp_ppo.yaml runner.resume_from=runs/reach_mlp_ppo-20250101-120000
    embodied eval configs/reach_mlp_ppo.yaml --checkpoint runs/reach_mlp_ppo-20250101-120000 --episodes 64 --video
    embodied eval configs/libero_object_mlp_dagger.yaml --checkpoint RUN --suites libero-pro-object --episodes 10
    embodied plot runs/reach_mlp_ppo-20250101-120000
    embodied list envs  (or policies, algorithms)
    embodied check-env Reach-v0 --steps 200
    embodied make-tiny-vla runs/tiny-smolvlm --backbone smolvlm-tiny
    embodied collect configs/pick_place_mlp_sft.yaml --episodes 200 --out data/pick_place [--format lerobot]
    embodied data info data/pick_place
    embodied config show configs/reach_mlp_ppo.yaml algorithm.lr=0.001
    embodied sft configs/pick_place_mlp_sft.yaml sft.dataset=data/pick_place
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train an experiment from a YAML recipe")
    p_train.add_argument("config", help="path to a YAML recipe in configs/")
    p_train.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_eval = sub.add_parser("eval", help="greedy eval of a checkpoint on fixed seeds: eval.json, a table, videos")
    p_eval.add_argument("config", help="path to a YAML recipe (its eval_env and policy sections are used)")
    p_eval.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_eval.add_argument("--checkpoint", help="a checkpoint file, or a run dir (its latest checkpoint); without it, the "
                        "policy as the config builds it (a pretrained folder in policy.model_path), with --out")
    p_eval.add_argument("--episodes", type=int, help="episodes to run (default: the suite's whole fixed eval set, e.g. LIBERO's tasks x 50 init states; else runner.eval_episodes); spread evenly over a fixed set")
    p_eval.add_argument("--video", action="store_true", help="record mp4s of the first logger.video.max_videos")
    p_eval.add_argument("--sample", action="store_true",
                        help="sample actions as training rollouts do (seeded, reproducible) instead of greedy ones "
                             "(the default where the config sets runner.eval_sample: true)")
    p_eval.add_argument("--out", help="output folder (default: <run dir>/eval/<checkpoint name>[-sampled][-seed<S>], "
                        "-seed<S> where experiment.seed is not the run's own)")
    p_eval.add_argument("--suites", help="comma-separated env ids and named sets (libero-pro-object, ...) to evaluate "
                        "in turn: one table per suite x axis, one eval.json, suites.png (--episodes: per suite)")
    p_sft = sub.add_parser("sft", help="behaviour cloning from demonstrations (sft.dataset), then eval")
    p_sft.add_argument("config", help="path to a YAML recipe with an sft section")
    p_sft.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_bench = sub.add_parser("bench", help="throughput, pipelining, weight-sync and time-to-target figures")
    p_bench.add_argument("--quick", action="store_true", help="every section at toy sizes (a smoke run, ~1 min)")
    p_bench.add_argument("--out", default="bench", help="folder for bench.json, bench.md and bench.png")
    p_collect = sub.add_parser("collect", help="record scripted-expert episodes as a dataset (for sft)")
    p_collect.add_argument("config", help="path to a YAML recipe (its env and policy.action_chunk are used)")
    p_collect.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_collect.add_argument("--episodes", type=int, required=True, help="episodes to keep")
    p_collect.add_argument("--out", required=True, help="dataset folder to write (new or empty; see --overwrite)")
    p_collect.add_argument("--overwrite", action="store_true",
                           help="replace the dataset already in --out (once the new one is complete)")
    p_collect.add_argument("--all", action="store_true", help="keep failed episodes too (default: successes only)")
    p_collect.add_argument("--noise", type=float, default=0.0,
                           help="execute the expert's actions with Gaussian noise of this fraction of half the "
                                "action range, recording the expert's own (DART; default 0)")
    p_collect.add_argument("--format", choices=["arrow", "lerobot"], default="arrow", dest="data_format",
                           help="arrow: embodied's dataset, a row per chunk step (default); lerobot: a LeRobot v3.0 "
                                "folder, a row per control step, cameras as AV1 mp4 (docs/lerobot.md)")
    p_config = sub.add_parser("config", help="see a recipe's whole config")
    config_sub = p_config.add_subparsers(dest="config_command", required=True)
    p_show = config_sub.add_parser("show", help="every field with its value, where it came from (default, recipe, "
                                   "override) and its doc")
    p_show.add_argument("config", help="path to a YAML recipe")
    p_show.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p_data = sub.add_parser("data", help="inspect demonstration datasets (embodied's or LeRobot's)")
    data_sub = p_data.add_subparsers(dest="data_command", required=True)
    p_info = data_sub.add_parser("info", help="episodes, frames, fps, features, tasks and disk size of a dataset")
    p_info.add_argument("path", help="a dataset folder: embodied's (meta.json) or LeRobot's (meta/info.json)")
    p_plot = sub.add_parser("plot", help="draw learning_curves.png from a run dir's metrics.jsonl")
    p_plot.add_argument("run_dir", nargs="+", help="a run dir (its learning_curves.png), or several to compare")
    p_plot.add_argument("--out", help="with several runs: the comparison PNG (default: compare.png here)")
    p_plot.add_argument("--baseline", action="append", default=[],
                        help="an eval.json (embodied eval) drawn as a dashed level in the comparison; repeatable")
    p_list = sub.add_parser("list", help="list registered envs, policies or algorithms")
    p_list.add_argument("what", choices=["envs", "policies", "algorithms"])
    sub.add_parser("check-env", help="validate a simulator against the contracts (see `embodied check-env --help`)",
                   add_help=False)  # listed here; embodied.env_runtime.check_env parses its own arguments, --help included
    p_tiny = sub.add_parser("make-tiny-vla", help="build a tiny VLA backbone offline (save_pretrained folder)")
    p_tiny.add_argument("out_dir", help="folder to write (AutoModelForImageTextToText.from_pretrained reads it)")
    p_tiny.add_argument("--backbone", default="smolvlm-tiny", help="smolvlm-tiny (default), qwen2_5_vl-tiny, paligemma-tiny, pi0-tiny (π0 itself) or pi05-tiny (π0.5)")
    p_tiny.add_argument("--seed", type=int, default=0, help="seed of the random initial weights")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["check-env"]:
        from embodied.env_runtime.check_env import main as check_env_main

        os.environ.setdefault("MUJOCO_GL", "egl")
        return check_env_main(argv[1:])
    args, extra = parser.parse_known_args(argv)
    # Overrides may follow flags (``eval CFG --checkpoint X env.num_envs=4``); argparse stops
    # collecting a positional list at the first flag, so the rest arrive here.
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if extra and (len(overrides) < len(extra) or not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    os.environ.setdefault("MUJOCO_GL", "egl")
    if args.command == "train":
        return _train(args.config, args.overrides)
    if args.command == "eval":
        return _eval(args)
    if args.command == "collect":
        return _collect(args)
    if args.command == "data":
        return _data_info(args.path)
    if args.command == "config":
        return _config_show(args.config, args.overrides)
    if args.command == "bench":
        return _bench(args.quick, Path(args.out))
    if args.command == "sft":
        return _sft(args.config, args.overrides)
    if args.command == "plot":
        return _plot(args.run_dir, args.out, args.baseline)
    if args.command == "make-tiny-vla":
        return _make_tiny_vla(args.out_dir, args.backbone, args.seed)
    return _list(args.what)


def _error(message: object) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _env_error(exc: Exception) -> int:
    """Exit 1 with the env's own traceback if an env raised (after the diagnosis, when env faults ran out of
    restarts: ``embodied eval``); any other exception goes on up."""
    from embodied.core.types import find_env_error
    from embodied.workers.restarts import FaultStop

    if isinstance(exc, FaultStop):  # its message ends with the env's own error
        print(f"error: {exc}", file=sys.stderr)
        return 1
    env_error = find_env_error(exc)
    if env_error is None:
        raise exc
    print(f"error: {env_error}", file=sys.stderr)  # the user's file and line, not the framework's frames
    return 1


def _config_show(path: str, overrides: list[str]) -> int:
    from embodied.config import ConfigError
    from embodied.config.show import show

    try:
        print(show(path, overrides))
    except ConfigError as exc:
        return _error(exc)
    return 0


def _train(path: str, overrides: list[str]) -> int:
    from embodied.config import ConfigError, load_config
    from embodied.logging.logger import prestart_wandb

    try:
        cfg = load_config(path, overrides)  # imports no torch
    except ConfigError as exc:
        return _error(exc)
    except Exception as exc:
        return _env_error(exc)
    prestart_wandb(cfg.logger)  # wandb's import, on the other core, while torch's runs here
    from embodied.config.show import differences

    print(f"config, beside the defaults (embodied config show {path} lists every field): "
          f"{' '.join(differences(cfg)) or 'none'}", flush=True)

    from embodied.runs.train import train

    from embodied.core.atomic import DiskFullError
    from embodied.checkpoint.store import CheckpointError
    from embodied.backends import ClusterLostError, WorkerLostError
    from embodied.workers.restarts import FaultStop

    try:
        result = train(cfg)
    except ConfigError as exc:
        return _error(exc)
    except (DiskFullError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClusterLostError, WorkerLostError, FaultStop) as exc:  # the runner named the checkpoint; here, the command
        resume = shlex.join(["embodied", "train", path, *[o for o in overrides if not o.startswith("runner.resume_from=")],
                             f"runner.resume_from={getattr(exc, 'run_dir', 'RUN_DIR')}"])
        print(f"error: {exc}\nresume with: {resume}", file=sys.stderr)
        return 1
    except Exception as exc:
        return _env_error(exc)
    _print_result(result.final_eval, result.run_dir, result.checkpoint)
    if result.plot is not None:
        print(f"learning curves: {result.plot}")
    if result.interrupted:
        print(f"stopped by {result.interrupted}; final checkpoint {result.checkpoint}; continue with: "
              f"embodied train {path} runner.resume_from={result.run_dir}", file=sys.stderr)
    return result.exit_code


def _print_result(final_eval: dict[str, float], run_dir: Path, checkpoint: Path | None) -> None:
    ev = final_eval
    if ev.get("eval/episodes", 0) > 0:
        print(f"final eval: success_rate={ev.get('eval/success_rate', float('nan')):.3f} "
              f"return={ev.get('eval/return', float('nan')):.3f} over {int(ev['eval/episodes'])} episodes")
    else:  # a run stopped (SIGTERM) before its eval, or runner.eval_episodes: 0: no "nan over 0 episodes" line
        print("final eval: none (the run ended without one)")
    print(f"run dir: {run_dir}\ncheckpoint: {checkpoint}")


def _bench(quick: bool, out: Path) -> int:
    from embodied.bench.run import bench, markdown

    os.environ.setdefault("WANDB_MODE", "disabled")
    report = bench(quick, out)
    print(markdown(report))
    print(f"wrote {out / 'bench.json'}, {out / 'bench.md'} and {out / 'bench.png'}")
    return 0


def _collect(args: argparse.Namespace) -> int:
    from embodied.core.atomic import DiskFullError
    from embodied.config import ConfigError, load_config
    from embodied.runs.collect import CollectError, collect

    try:
        command = ["embodied", "collect", args.config, *args.overrides, "--episodes", str(args.episodes),
                   "--out", args.out]
        command += ["--all"] * args.all + ["--noise", str(args.noise)] * bool(args.noise)
        command += ["--format", args.data_format] * (args.data_format != "arrow")
        report = collect(load_config(args.config, args.overrides), args.episodes, Path(args.out), args.all,
                         shlex.join(command), args.noise, args.data_format, args.overwrite)
    except (ConfigError, CollectError) as exc:
        return _error(exc)
    except DiskFullError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        return _env_error(exc)
    short = f" (asked for {args.episodes}: the expert failed too often)" if report.episodes < args.episodes else ""
    rows = "chunk steps" if report.data_format == "arrow" else "frames (LeRobot v3.0)"
    for path in report.removed:
        print(f"removed {path}: the unfinished write of a collect that was killed")
    if report.replaced:
        print(f"replaced the dataset that was in {report.path} (--overwrite)")
    print(f"wrote {report.episodes} episodes{short}, {report.rows} {rows}, to {report.path} "
          f"in {report.seconds:.1f} s ({report.attempted / report.seconds:.1f} episodes/s)")
    print(f"the expert succeeded in {report.successes} of {report.attempted} episodes run")
    return 0


def _data_info(path: str) -> int:
    from embodied.data.info import format_summary, summarize

    try:
        print(format_summary(summarize(path)))
    except (FileNotFoundError, ValueError) as exc:
        return _error(exc)
    return 0


def _sft(path: str, overrides: list[str]) -> int:
    from embodied.config import ConfigError, load_config
    from embodied.runs.sft import sft

    try:
        result = sft(load_config(path, overrides))
    except ConfigError as exc:
        return _error(exc)
    except Exception as exc:
        return _env_error(exc)
    _print_result(result.final_eval, result.run_dir, result.checkpoint)
    print(f"start RL from it: embodied train CONFIG policy.init_from={result.checkpoint}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from embodied.checkpoint.store import find_checkpoint
    from embodied.config import ConfigError, load_config
    from embodied.evaluation.stats import format_table
    from embodied.evaluation.run import evaluate_checkpoint

    try:
        cfg = load_config(args.config, args.overrides)
        checkpoint = find_checkpoint(args.checkpoint) if args.checkpoint else None
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        return _error(exc)
    if checkpoint is None and not args.out:
        return _error("embodied eval without --checkpoint evaluates the policy as the config builds it (e.g. a "
                      "pretrained folder in policy.model_path): give --out, the folder for eval.json")
    args.sample = args.sample or cfg.runner.eval_sample  # the recipe's own way of acting in evals, or --sample
    episodes = args.episodes  # None: the env's fixed eval set (e.g. LIBERO's tasks x init states) or runner.eval_episodes
    if episodes is not None and episodes < 1:
        return _error(f"--episodes must be >= 1, got {episodes}")
    if args.out:
        out = Path(args.out)
    else:
        out = _default_eval_dir(checkpoint, cfg.experiment.seed, args.sample)
    if not args.suites and len(cfg.eval_members()) > 1:  # a mixture: one eval (and table row) a member
        args.suites = ",".join(cfg.eval_members())
    if args.suites:
        return _eval_suites(cfg, checkpoint, args, episodes, out.with_name(out.name + "-suites") if not args.out else out)
    try:
        report = evaluate_checkpoint(cfg, checkpoint, episodes, out, video=args.video, sample=args.sample)
    except ValueError as exc:
        return _error(exc)
    except Exception as exc:
        return _env_error(exc)
    print(format_table(report))
    print(f"eval.json: {out / 'eval.json'}")
    if report.videos:
        print(f"videos: {len(report.videos)} mp4 in {out / 'videos'}")
    return 0


def _default_eval_dir(checkpoint: Path, seed: int, sample: bool) -> Path:
    """``<run dir>/eval/<checkpoint>[-sampled][-seed<S>]``: a sampled eval never overwrites the greedy one, and an
    eval on other seeds than the run's own (``experiment.seed=S``) never overwrites the run's: each seed's episodes
    differ. The run's seed is read from its config.yaml (none there: the plain name is for seed 0)."""
    import yaml

    from embodied.checkpoint.store import run_dir_of

    run_dir = run_dir_of(checkpoint)
    try:
        run_seed = int(((yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("experiment") or {})
                       .get("seed", 0))
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
        run_seed = 0
    name = checkpoint.stem + ("-sampled" if sample else "") + ("" if seed == run_seed else f"-seed{seed}")
    return run_dir / "eval" / name


def _eval_suites(cfg: object, checkpoint: Path | None, args: argparse.Namespace, episodes: int | None, out: Path) -> int:
    from embodied.evaluation.multi import evaluate_suites

    try:
        report = evaluate_suites(cfg, checkpoint, args.suites, episodes, out, video=args.video, sample=args.sample)
    except (ValueError, KeyError) as exc:
        return _error(exc)
    except Exception as exc:
        return _env_error(exc)
    print(report["table"])
    print(f"eval.json: {out / 'eval.json'} (per suite: {out}/<suite>/eval.json); plot: {out / 'suites.png'}")
    return 0


def _plot(run_dirs: list[str], out: str | None, baselines: list[str]) -> int:
    from embodied.logging.plot import plot_compare, plot_run

    try:
        if len(run_dirs) == 1 and out is None and not baselines:
            print(plot_run(run_dirs[0]))
        else:
            print(plot_compare(run_dirs, out or "compare.png", baselines))
    except (FileNotFoundError, ValueError) as exc:
        return _error(exc)
    return 0


def _make_tiny_vla(out_dir: str, backbone: str, seed: int) -> int:
    """The tiny model ``backbone`` names, built by the policy whose config lists it (``PolicyConfig.tiny_names``
    and ``make_tiny``, found through the policy registry: this names no model)."""
    from embodied.core.registry import POLICIES, load_entry_point

    builders: dict[str, str] = {}
    for name in POLICIES.names():
        try:
            cls = POLICIES.resolve(name)
        except Exception:  # noqa: BLE001 - a plug-in that does not load offers no tiny model
            continue
        for tiny in getattr(cls, "tiny_names", ()):
            if getattr(cls, "make_tiny", ""):
                builders.setdefault(tiny, cls.make_tiny)
    if backbone not in builders:
        return _error(f"--backbone: unknown tiny backbone {backbone!r}; known: {', '.join(sorted(builders))}")
    if Path(out_dir).exists() and any(Path(out_dir).iterdir()):
        return _error(f"{out_dir!r} exists and is not empty; choose a new folder")
    print(load_entry_point(builders[backbone])(out_dir, backbone, seed))
    return 0


def _list(what: str) -> int:
    from embodied.core.registry import ALGORITHMS, ENVS, POLICIES

    if what == "envs":
        from embodied.env_runtime.catalog import describe_env, format_env_table

        print(format_env_table([describe_env(name) for name in ENVS.names()]))
        print("Any gymnasium id (e.g. HalfCheetah-v5) and any 'package.module:Class' work as env.id too.")
        from embodied.core.registry import ENV_SETS

        sets = [f"{name} ({len(ENV_SETS.resolve(name))} ids)" for name in ENV_SETS.names()]
        if sets:
            print(f"Named sets (env.id: a mixture of their ids; eval --suites; runner.extra_evals): {', '.join(sets)}")
        return 0
    from embodied.env_runtime.catalog import summary

    registry = POLICIES if what == "policies" else ALGORITHMS  # each name: its config class
    for name in registry.names():
        try:
            about = summary(registry.resolve(name)) or "(no docstring)"
        except Exception as exc:  # noqa: BLE001 - a missing extra or a broken plug-in: listed, not fatal
            about = f"unavailable: {exc}"
        print(f"{name:12s} {about}  ({registry.entry_point(name)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""``gea-graph sweep RECIPE[,RECIPE...] --out DIR``: hyperparameter search on Optuna, one machine or many.

Each recipe gets a study of ``--trials`` finished trials (complete or pruned, whoever ran them: a rerun, or another
worker, goes on until the study holds them, so ``--trials 3`` then ``--trials 4`` runs one more), drawn by TPE from
the recipe's ``sweep:`` block (or ``--space FILE.yaml``). Each trial is a normal run folder, ``DIR/<recipe>/trial<N>``,
trained under ``--max-time`` minutes with at most ``--max-params`` parameters; Optuna's pruner may end it at an epoch
end. Without ``--storage`` the studies live in ``DIR/optuna.db`` (SQLite); with a shared ``--storage URL`` (e.g.
``postgresql://user:password@host/db``, or ``$GEA_GRAPH_STORAGE``) and the same ``--study``, the same command on
several machines works on one study, each trial once. A killed worker's trial is failed after three silent heartbeats
and retried with its values.

Writes ``DIR/trials.csv``, ``DIR/best-<recipe>.yaml``, ``DIR/sweep.md`` with Optuna's plots, and prints a line per
trial; ``--confirm SEEDS`` retrains each best configuration on new seeds with ``gea-graph bench`` (``DIR/confirm``).
``gea-graph sweep DIR --report`` redraws the outputs from the storage. Credentials in a URL never reach a file or
the output.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int
from gea_graph.cli.train import MAX_THREADS

#: ``--pruner`` and ``--sampler`` (gea_graph.sweep.study makes them; not imported here, to keep --help fast).
PRUNERS = ("median", "hyperband", "none")
SAMPLERS = ("tpe", "random")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="hyperparameter search on Optuna", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", type=arg(checks.text), metavar="RECIPE[,RECIPE...] | DIR",
                        help="comma-separated recipe names or files (with --report: the sweep folder)")
    parser.add_argument("--out", type=arg(checks.output_folder), default=None,
                        help="sweep folder (default: runs/sweep)")
    parser.add_argument("--report", action="store_true", help="redraw the outputs of the sweep folder DIR")
    parser.add_argument("--trials", type=positive_int, default=20,
                        help="finished trials each recipe's study holds at the end (default: 20)")
    parser.add_argument("--max-time", type=arg(checks.minutes), default=None,
                        help="wall-clock cap of each trial, in minutes (as bench's)")
    parser.add_argument("--max-params", type=positive_int, default=None,
                        help="trials whose model has more parameters are pruned before training")
    parser.add_argument("--jobs", type=arg(checks.positive_int, high=MAX_THREADS), default=1, metavar="N",
                        help="trials trained at the same time on this machine (worker processes)")
    parser.add_argument("--threads", type=arg(checks.positive_int, high=MAX_THREADS), default=None,
                        help="CPU threads of torch per worker (default: torch's)")
    parser.add_argument("--storage", type=arg(checks.text), default=None, metavar="URL",
                        help="shared Optuna storage, e.g. postgresql://user:password@host/db (default: "
                             "$GEA_GRAPH_STORAGE, else DIR/optuna.db)")
    parser.add_argument("--study", type=arg(checks.text), default=None, metavar="NAME",
                        help="study name (default: the name of DIR; required with --storage)")
    parser.add_argument("--seed", type=arg(checks.seed), default=None, help="seed of the sampler")
    parser.add_argument("--space", type=arg(checks.input_file), default=None, metavar="FILE.yaml",
                        help="search space replacing the recipes' sweep: blocks")
    parser.add_argument("--confirm", type=arg(checks.int_list), default=None, metavar="SEEDS",
                        help="retrain each recipe's best configuration on these new seeds (gea-graph bench)")
    parser.add_argument("--set", dest="overrides", type=arg(checks.override), action="append", default=[],
                        metavar="KEY=VALUE", help="override applied to every recipe and trial (repeatable)")
    parser.add_argument("--pruner", choices=PRUNERS, default="median", help="Optuna pruner (default: median)")
    parser.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler (default: tpe)")
    parser.add_argument("--heartbeat", type=arg(checks.positive_int, high=3600), default=30, metavar="SECONDS",
                        help="seconds between a trial's heartbeats; a trial silent for three is failed and retried")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    r"""The command as typed, with the storage URL's credentials masked (recorded in ``sweep.json``)."""
    from gea_graph.sweep.storage import mask

    words = ["gea-graph", "sweep", args.target]
    for flag, value in (("--out", args.out), ("--trials", args.trials), ("--max-time", args.max_time),
                        ("--max-params", args.max_params), ("--jobs", args.jobs), ("--threads", args.threads),
                        ("--storage", mask(args.storage)), ("--study", args.study), ("--seed", args.seed),
                        ("--space", args.space),
                        ("--confirm", ",".join(map(str, args.confirm)) if args.confirm else None)):
        if value is not None:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    for item in args.overrides:
        words += ["--set", item]
    return " ".join(words)


def run(args: argparse.Namespace) -> int:
    from gea_graph.sweep import SweepOptions, report_sweep, run_sweep
    from gea_graph.sweep.storage import STORAGE_ENV, scrub

    url = args.storage or os.environ.get(STORAGE_ENV)
    try:
        if args.report:
            return _report(args, report_sweep)
        specs = names.recipe_list(args.target, "RECIPE")
        opts = SweepOptions(trials=args.trials, max_time=args.max_time, max_params=args.max_params, jobs=args.jobs,
                            threads=args.threads, storage=args.storage, study=args.study, seed=args.seed,
                            space=args.space, confirm=args.confirm or (), overrides=list(args.overrides),
                            pruner=args.pruner, sampler=args.sampler, heartbeat=args.heartbeat,
                            command=command_line(args), worker=args.worker)
        return run_sweep(specs, Path(args.out or "runs/sweep"), opts)
    except Exception as err:  # the message may carry the storage URL: it leaves with the credentials masked
        from gea_graph.cli import one_line, user_errors

        if os.environ.get("GEA_GRAPH_DEBUG") or not isinstance(err, (*user_errors(), checks.BadValue)):
            raise
        raise type(err)(scrub(one_line(err), url)) if _rebuildable(err) else ValueError(scrub(one_line(err), url))


def _rebuildable(err: BaseException) -> bool:
    try:
        type(err)("x")
    except Exception:  # noqa: BLE001
        return False
    return True


def _report(args: argparse.Namespace, report_sweep) -> int:
    folder = Path(args.target)
    if not folder.is_dir():
        raise checks.bad("DIR", args.target, "a sweep folder (with --report)", why="is not a folder")
    report_sweep(folder, args.storage)
    return 0

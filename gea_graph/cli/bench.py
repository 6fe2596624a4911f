r"""``gea-graph bench``: run recipes x seeds and write ``results.csv``, ``results.md`` and ``curves.png``.

    gea-graph bench --recipes geaet-zinc-quick --seeds 0 --max-time 5
    gea-graph bench --recipes geaet-zinc,gps-zinc --seeds 0,1,2,3 --out runs/zinc
    gea-graph bench --suite tree-neighbours-match --seeds 0 [--depths 2,3,4]

Runs already complete in ``--out`` are skipped, so an interrupted bench continues where it stopped. The tree suite
also plots test accuracy against depth per model (``tree-neighbours-match.png``, like GEAET's Figure 7).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gea_graph.cli.train import add_common_trainer_args


def _ints(text: str) -> list:
    return [int(v) for v in text.split(",") if v.strip()]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmark recipes over seeds", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--recipes", help="comma-separated recipe names or paths")
    what.add_argument("--suite", choices=["tree-neighbours-match"], help="a predefined sweep")
    parser.add_argument("--seeds", type=_ints, default=None, help="comma-separated seeds (default: each recipe's)")
    parser.add_argument("--depths", type=_ints, default=None, help="tree depths of the suite (default: 2..7)")
    parser.add_argument("--max-time", type=float, default=None, help="wall-clock cap of each run, in minutes")
    parser.add_argument("--out", default=None, help="output directory (default: runs/bench or runs/<suite>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override applied to every recipe, e.g. --set trainer.max_epochs=5 (repeatable)")
    add_common_trainer_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.bench.runner import SUITES, TREE_DEPTHS, plot_depth_sweep, run_bench
    from gea_graph.train import RecipeError

    if args.suite:
        depths = set(args.depths or TREE_DEPTHS)
        recipes = [r for r in SUITES[args.suite] if int(r.rsplit("-r", 1)[1]) in depths]
        out = Path(args.out or f"runs/{args.suite}")
    else:
        recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
        out = Path(args.out or "runs/bench")
    trainer_args = ["--accelerator", args.accelerator, "--devices", str(args.devices),
                    "--num-nodes", str(args.num_nodes), "--strategy", args.strategy]
    if args.threads is not None:
        trainer_args += ["--threads", str(args.threads)]
    try:
        runs = run_bench(recipes, out, seeds=args.seeds, max_time=args.max_time, overrides=args.overrides,
                         trainer_args=trainer_args)
    except RecipeError as err:
        print(f"gea-graph bench: error: {err}", file=sys.stderr)
        return 2
    if args.suite:
        plot_depth_sweep(runs, out / f"{args.suite}.png")
    print(f"wrote {out / 'results.csv'}, {out / 'results.md'}, {out / 'curves.png'}")
    failed = [r for r in runs if r.result is None]
    print((out / "results.md").read_text())
    return 1 if failed else 0

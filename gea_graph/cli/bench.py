r"""``gea-graph bench``: run recipes x seeds and write ``results.csv``, ``results.md`` and ``curves.png``.

    gea-graph bench --recipes geaet-zinc-quick --seeds 0 --max-time 5
    gea-graph bench --recipes geaet-zinc,gps-zinc --seeds 0,1,2,3 --out runs/zinc
    gea-graph bench --suite tree-neighbours-match --seeds 0 [--depths 2,3,4]
    gea-graph bench --suite zinc-cpu-10min              # 2 runs at a time, 1 thread each (the suite's setting)
    gea-graph bench --recipes gcn-zinc-cpu,gcn-geanet-zinc-cpu --jobs 2 --threads 1 --max-time 10
    gea-graph bench --list-suites

Runs already complete in ``--out`` are skipped, so an interrupted bench continues where it stopped. ``--stop-after
MINUTES`` makes an invocation a chunk: it stops cleanly after that time (each running run at its next epoch end,
checkpoints written; exit code 3 while runs remain), and the same command, in the same folder or a copy of it on
another machine, goes on exactly where it stopped (docs/results.md: GPU work in chunks). ``--jobs N``
trains N runs at once (each in its own process, its output in ``<run>/train.log``). The depth-sweep suites also
plot test (solid) and train (dashed, where measured) accuracy against depth per model (``<suite>.png``, like GEAET's
Figure 7). ``scripts/make_results.py`` turns bench folders into ``docs/results.md``.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gea_graph import checks
from gea_graph.bench.child import option_words
from gea_graph.cli import arg, names
from gea_graph.cli.train import MAX_THREADS, add_common_trainer_args, devices_text


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmark recipes over seeds", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--recipes", type=arg(names.recipe_list), help="comma-separated recipe names or paths")
    what.add_argument("--suite", type=arg(names.suite_name), metavar="NAME", help="a named suite (see --list-suites)")
    what.add_argument("--list-suites", action="store_true", help="list the suites with their size and exit")
    parser.add_argument("--seeds", type=arg(checks.int_list), default=None,
                        help="comma-separated seeds (default: each recipe's); a repeated seed runs once")
    parser.add_argument("--depths", type=arg(checks.int_list, item=checks.tree_depth), default=None,
                        help="tree depths of a depth-sweep suite (default: all of the suite's)")
    parser.add_argument("--max-time", type=arg(checks.minutes), default=None,
                        help="wall-clock cap of each run, in minutes")
    parser.add_argument("--stop-after", type=arg(checks.non_negative_minutes), default=None, metavar="MINUTES",
                        help="stop this invocation cleanly after MINUTES (runs pause at an epoch end; run the same "
                             "command again to go on; exit code 3 while runs remain)")
    parser.add_argument("--jobs", type=arg(checks.positive_int, high=MAX_THREADS), default=None, metavar="N",
                        help="runs trained at the same time (default: the suite's, else 1)")
    parser.add_argument("--out", type=arg(checks.output_folder), default=None,
                        help="output directory (default: runs/bench or runs/<suite>)")
    parser.add_argument("--set", dest="overrides", type=arg(checks.override), action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override applied to every recipe, e.g. --set trainer.max_epochs=5 (repeatable)")
    add_common_trainer_args(parser)
    parser.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    r"""The ``gea-graph bench`` command of ``args`` as a user would type it (recorded in ``bench.json``)."""
    words = ["gea-graph", "bench"]
    words += ["--suite", args.suite] if args.suite else ["--recipes", ",".join(args.recipes)]
    for flag, value in (("--seeds", args.seeds), ("--depths", args.depths)):
        if value:
            words += [flag, ",".join(map(str, value))]
    words += option_words((("--max-time", args.max_time), ("--stop-after", args.stop_after), ("--jobs", args.jobs),
                           ("--threads", args.threads), ("--out", args.out)), args.overrides)
    if args.accelerator != "auto":
        words += ["--accelerator", args.accelerator]
    return " ".join(words)


def run(args: argparse.Namespace) -> int:
    from gea_graph.bench.suites import SUITES, get_suite, list_suites

    if args.list_suites:
        print(list_suites(args.seeds))
        return 0
    from gea_graph.bench.runner import BENCH_FILE, REPORT_FILES, plot_depth_sweep, run_bench
    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.train.recipe import RecipeError
    from gea_graph.train.run import PAUSED_EXIT_CODE

    suite = None
    seeds, max_time, overrides = args.seeds, args.max_time, list(args.overrides)
    recipe_overrides: dict[str, tuple[str, ...]] = {}
    jobs, threads = args.jobs, args.threads
    if args.depths and (not args.suite or get_suite(args.suite).plot != "depth"):
        sweeps = ", ".join(name for name, s in sorted(SUITES.items()) if s.plot == "depth")
        raise checks.bad("--depths", ",".join(map(str, args.depths)), f"given with a depth-sweep suite ({sweeps})",
                         why=f"does not apply to {'--suite ' + args.suite if args.suite else '--recipes'}")
    if args.suite:
        suite = get_suite(args.suite)
        recipes = list(suite.recipes)
        if args.depths:
            have = sorted({int(r.rsplit("-r", 1)[1]) for r in recipes})
            missing = sorted(set(args.depths) - set(have))
            if missing:
                raise checks.bad("--depths", ",".join(map(str, args.depths)),
                                 f"among the depths of {args.suite}: {','.join(map(str, have))}")
            recipes = [r for r in recipes if int(r.rsplit("-r", 1)[1]) in set(args.depths)]
        seeds = seeds if seeds is not None else suite.seeds
        max_time = max_time if max_time is not None else suite.max_time
        overrides = [*suite.overrides, *overrides]
        recipe_overrides = dict(suite.recipe_overrides)
        jobs = jobs if jobs is not None else suite.jobs
        threads = threads if threads is not None else suite.threads
        out = Path(args.out or f"runs/{args.suite}")
    else:
        recipes = list(args.recipes)
        out = Path(args.out or "runs/bench")
    refuse_overlap({"the recipe": [r for r in recipes if os.path.isfile(r)]},
                   {"--out": [out / name for name in (BENCH_FILE, *REPORT_FILES)]})
    checks.placement(args.accelerator, args.devices)
    trainer_args = ["--accelerator", args.accelerator, "--devices", devices_text(args.devices),
                    "--num-nodes", str(args.num_nodes), "--strategy", args.strategy,
                    *(["--verbose"] if args.verbose else [])]
    try:
        runs = run_bench(recipes, out, seeds=seeds, max_time=max_time, overrides=overrides,
                         trainer_args=trainer_args, jobs=jobs or 1, threads=threads, command=command_line(args),
                         stop_after=args.stop_after, recipe_overrides=recipe_overrides)
    except (RecipeError, ValueError) as err:
        print(f"gea-graph bench: error: {err}", file=sys.stderr)
        return 2
    if suite is not None and suite.plot == "depth":
        plot_depth_sweep(runs, out / f"{suite.name}.png")
    print(f"wrote {out / 'results.csv'}, {out / 'results.md'}, {out / 'curves.png'}")
    print((out / "results.md").read_text())
    if any(r.status == "failed" for r in runs):
        return 1
    remaining = [r for r in runs if r.status != "complete"]
    if remaining:
        print(f"stopped after {args.stop_after:g} minutes: {len(runs) - len(remaining)} of {len(runs)} runs "
              f"complete; run the same command again (in {out} or a copy of it) to go on")
        return PAUSED_EXIT_CODE
    return 0

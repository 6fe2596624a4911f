r"""``gea-graph train RECIPE [overrides] [--out DIR] [--resume]``: one training run of a recipe.

The run directory holds ``checkpoints/best.ckpt``, ``checkpoints/last.ckpt``, the resolved ``recipe.yaml``,
``metrics.csv`` (one row per epoch) and, once finished, ``result.json``. Multi-GPU / multi-node through Lightning's
DDP: ``--devices 4 --strategy ddp`` (and ``--num-nodes``), with no change to the recipe: its batch size is the
global one, shared out among the processes.

``--stop-after MINUTES`` pauses the run cleanly at the first epoch end after that time (checkpoints written, exit code
3); ``--resume`` continues it exactly, in the same folder or a copy of it.
"""
from __future__ import annotations

import argparse
import os

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int

#: Torch threads or parallel runs beyond this are a typo, not a machine.
MAX_THREADS = 4096


def add_common_trainer_args(parser: argparse.ArgumentParser) -> None:
    r"""Lightning placement flags shared by ``train`` and ``bench``."""
    parser.add_argument("--accelerator", type=arg(checks.accelerator), default="auto",
                        help=f"{', '.join(checks.ACCELERATORS)} (default: auto)")
    parser.add_argument("--devices", type=arg(checks.devices), default="auto",
                        help="devices per node: a number, a list of GPU indices such as 0,1, or auto")
    parser.add_argument("--num-nodes", type=positive_int, default=1, help="number of nodes (default: 1)")
    parser.add_argument("--strategy", type=arg(checks.strategy), default="auto",
                        help="Lightning strategy, e.g. ddp (default: auto)")
    parser.add_argument("--threads", type=arg(checks.positive_int, high=MAX_THREADS), default=None,
                        help="CPU threads of torch per process (default: torch's; 1 is much faster on a busy CPU)")
    parser.add_argument("--verbose", action="store_true",
                        help="also show Lightning's start-up banners and its warnings about its own code")


def devices_text(devices: int | list[int] | str) -> str:
    r"""``--devices`` as typed (the inverse of :func:`gea_graph.checks.devices`)."""
    return ",".join(map(str, devices)) if isinstance(devices, list) else str(devices)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train one recipe", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", type=arg(names.recipe_spec),
                        help="recipe name (in models/) or path to a recipe YAML")
    parser.add_argument("overrides", nargs="*", default=[], type=arg(checks.override),
                        help="dotted overrides, e.g. model.hidden=64 trainer.max_epochs=5")
    parser.add_argument("--out", type=arg(checks.output_folder), default=None,
                        help="run directory (default: runs/<recipe>/seed<seed>)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.ckpt")
    parser.add_argument("--seed", type=arg(checks.seed), default=None,
                        help="seed (default: the recipe's first seed)")
    parser.add_argument("--max-time", type=arg(checks.minutes), default=None, help="wall-clock cap in minutes")
    parser.add_argument("--stop-after", type=arg(checks.non_negative_minutes), default=None, metavar="MINUTES",
                        help="pause cleanly at the first epoch end after MINUTES (exit code 3; --resume continues)")
    parser.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_common_trainer_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.train.logs import METRICS_FILE
    from gea_graph.train.recipe import load_recipe, recipe_source, resolve_recipe
    from gea_graph.train.run import PAUSED_EXIT_CODE, RunPaused, fit
    from gea_graph.train.run_dir import RECIPE_FILE, RESULT_FILE

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    checks.placement(args.accelerator, args.devices)
    path = resolve_recipe(args.recipe)
    print(f"recipe: {recipe_source(path)}", flush=True)
    recipe = load_recipe(path, args.overrides)
    seed = recipe.trainer.seeds[0] if args.seed is None else args.seed
    out = args.out or f"runs/{recipe.name}/seed{seed}"
    written = [os.path.join(out, name) for name in (RECIPE_FILE, RESULT_FILE, METRICS_FILE)]
    refuse_overlap({"the recipe": path}, {"--out": written + [os.path.join(out, "checkpoints", name)
                                                              for name in ("best.ckpt", "last.ckpt")]})
    try:
        fit(recipe, out, seed=seed, resume=args.resume, accelerator=args.accelerator,
            devices=args.devices, num_nodes=args.num_nodes, strategy=args.strategy,
            max_time=args.max_time, tensorboard=args.tensorboard, progress=not args.no_progress,
            stop_after=args.stop_after, banners=args.verbose)
    except RunPaused as paused:
        print(f"gea-graph train: {paused}", flush=True)
        return PAUSED_EXIT_CODE
    return 0

"""``gea-graph perf``: the side-by-side performance suite (see :mod:`gea_graph.bench.perf`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Registers ``perf`` and sets ``func``."""
    p = subparsers.add_parser(
        "perf", help="run the performance suite (ours vs references, ratios)",
        description="Times forward + backward of our layers and pipelines against references in "
                    "the same process; prints the table and writes DIR/perf.md and DIR/perf.json.")
    p.add_argument("--quick", action="store_true",
                   help="CI-sized run (fewer training steps and graphs; < 3 min on 2 CPU cores)")
    p.add_argument("--out", type=arg(checks.output_folder), default=Path("perf-results"), metavar="DIR",
                   help="output folder for perf.md and perf.json (default: ./perf-results)")
    p.add_argument("--device", type=arg(checks.torch_device), default="auto",
                   help="'auto' (CUDA when available), 'cpu', 'cuda', 'cuda:1', ... (default: auto)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads for every row (default: torch's default)")
    p.add_argument("--only", nargs="+", type=arg(names.perf_group), metavar="GROUP", default=None,
                   help="run only these groups of rows: dataset external gps attention geaet "
                        "graphormer agf spd train geanet memory predict gpu, and compile (compiled vs eager) and "
                        "scale (PCQM4Mv2 replica build and loader vs OGB and PyG), which run only when named")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs the suite; exit code 0 when it ran (missed targets are reported, not failures)."""
    from gea_graph.bench.perf.core import Settings, resolve_device
    from gea_graph.bench.perf.suite import run_suite

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    settings = Settings.make(args.quick, resolve_device(args.device))
    run_suite(settings, args.out, only=args.only)
    return 0

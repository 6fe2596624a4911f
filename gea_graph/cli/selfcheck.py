r"""``gea-graph selfcheck [--device auto|cpu|cuda] [--quick]``: does this machine train our models correctly?

Runs the checks of :mod:`gea_graph.selfcheck` and prints a pass/fail
table with the device, driver, library versions and peak memory: forward and backward of every model family,
deterministic algorithms for every loss, the ``GraphLoader`` with pinned memory and workers, bf16 autocast against
fp32, ``torch.compile`` of the GEAET layer, a checkpoint made on the device reloaded on a CPU, a 2-process DDP run
against 1 process (gloo on CPUs, NCCL with 2 or more GPUs), the host-sync census of a training step and packed vs
dense attention. Exit code 0 when no check failed, 1 otherwise.

    gea-graph selfcheck                       # the GPU when there is one, else the CPU
    gea-graph selfcheck --device cpu --quick  # what CI runs
    gea-graph selfcheck --only "DDP: 2 processes = 1 process" --json selfcheck.json
"""
from __future__ import annotations

import argparse
import sys

from gea_graph import checks
from gea_graph.cli import arg, names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("selfcheck", help="check that this machine trains the models correctly",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=arg(checks.torch_device), default="auto",
                        help="auto (CUDA when available), cpu or cuda[:N] "
                             "(default: auto)")
    parser.add_argument("--quick", action="store_true",
                        help="the CI-sized run (one epoch of the DDP check; compiling with aot_eager on a CPU)")
    parser.add_argument("--only", type=arg(names.selfcheck_name), action="append", default=None, metavar="CHECK",
                        help="run only this check (repeatable; names as in the table, see --list)")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--json", type=arg(checks.output_file), default=None, metavar="FILE",
                        help="also write the results as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.selfcheck import (
        CHECKS,
        FAIL,
        environment,
        format_report,
        peak_memory_mib,
        report_json,
        resolve_device,
        run_checks,
    )

    if args.list:
        print("\n".join(CHECKS))
        return 0
    device = resolve_device(args.device)
    outcomes = run_checks(device, quick=args.quick, only=args.only, log=lambda line: print(line, file=sys.stderr))
    env, peak = environment(device), peak_memory_mib(device)
    print(format_report(outcomes, env, peak), end="")
    if args.json is not None:
        from gea_graph.io import write_text

        write_text(args.json, report_json(outcomes, env, peak))
    return 1 if any(o.status == FAIL for o in outcomes) else 0

"""The ``gea-graph`` command.

Each sub-command lives in its own module of this package and exposes ``add_parser(subparsers)``, which registers the
sub-command and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
Modules are imported lazily-in-order here so that ``gea-graph --help`` stays fast and one broken optional
dependency does not take the whole command down.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Sub-command modules, in the order they are listed by ``gea-graph --help``.
SUBCOMMANDS = ("data", "train", "bench", "info", "viz", "diagnose", "perf")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gea-graph",
        description="Graph transformers on PyG: datasets, training, benchmarks, pictures.",
    )
    from gea_graph import __version__

    parser.add_argument("--version", action="version", version=f"gea-graph {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"gea_graph.cli.{name}")
        except ModuleNotFoundError as err:
            # Only skip sub-commands whose module does not exist yet; a missing dependency inside it is a real error.
            if err.name == f"gea_graph.cli.{name}":
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

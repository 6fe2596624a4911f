"""The ``gea-graph`` command.

Each sub-command lives in its own module of this package and exposes ``add_parser(subparsers)``, which registers the
sub-command and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
Modules are imported lazily-in-order here so that ``gea-graph --help`` stays fast and one broken optional
dependency does not take the whole command down.

Errors: bad input (a value out of range, a missing or corrupt file, an unknown name, a recipe that does not fit) ends
with one line ``gea-graph COMMAND: error: ...`` naming the bad value and what is allowed, and exit code 2, never a
traceback; ``gea-graph --debug COMMAND ...`` (or ``GEA_GRAPH_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import sys
from collections.abc import Sequence
from typing import NoReturn

# Before torch is imported (its allocator reads this once): large CPU tensors page-aligned on transparent huge
# pages fragment the heap less and run faster; see gea_graph.train.memory. The environment's own value wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# Sub-command modules, in the order they are listed by ``gea-graph --help``.
SUBCOMMANDS = ("data", "train", "bench", "info", "viz", "diagnose", "perf", "selfcheck")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with one-line errors (``PROG: error: MESSAGE (see PROG --help)``, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="gea-graph",
        description="Graph transformers on PyG: datasets, training, benchmarks, pictures.",
    )
    from gea_graph import __version__

    parser.add_argument("--version", action="version", version=f"gea-graph {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
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


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean bad input (reported in one line) rather than a bug."""
    from gea_graph.data import CacheError, RawFileError
    from gea_graph.train import CheckpointError, RunLockError

    return (ValueError, LookupError, OSError, pickle.UnpicklingError, CacheError, RawFileError, CheckpointError,
            RunLockError)


def one_line(err: BaseException) -> str:
    """The message of an exception on one line (a ``KeyError``'s without its quotes)."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return text or type(err).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # Dotted overrides may follow options (`train R --out X key=value`): argparse leaves them over.
    overrides = [token for token in extra if "=" in token and not token.startswith("-")]
    if overrides and args.command in ("train", "info"):
        args.overrides += overrides
        extra = [token for token in extra if token not in overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    if args.debug or os.environ.get("GEA_GRAPH_DEBUG"):
        return int(args.func(args) or 0)
    try:
        return int(args.func(args) or 0)
    except Exception as err:
        if not isinstance(err, user_errors()):
            raise
        print(f"gea-graph {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``gea-graph`` command.

Each sub-command lives in its own module of this package and exposes ``add_parser(subparsers)``, which registers the
sub-command and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit code).
Modules are imported lazily-in-order here so that ``gea-graph --help`` stays fast and one broken optional
dependency does not take the whole command down.

Values: every option (and positional) is declared with ``type=arg(checks.<check>)`` (:func:`arg`, the checks of
:mod:`gea_graph.checks`) or ``choices``, so a bad value is refused while the command line is read, before any work;
``tests/test_cli_values.py`` walks every sub-command's options and fails, by name, for one without a check.

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
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from gea_graph import checks

# Sub-command modules, in the order they are listed by ``gea-graph --help``.
SUBCOMMANDS = ("data", "train", "bench", "sweep", "info", "predict", "evaluate", "export", "viz", "diagnose", "perf",
               "selfcheck")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with one-line errors (``PROG: error: MESSAGE (see PROG --help)``, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def arg(check: Callable[..., Any], **options: Any) -> Callable[[str], Any]:
    """The argparse ``type=`` of an option checked by :obj:`check` (a function of :mod:`gea_graph.checks`, called
    with the option's text and :obj:`options`): a bad value ends the command before any work, in one line that names
    the option, the value and what is allowed (``gea-graph train: error: argument --max-time: 'nan' is not allowed;
    it must be a finite number of minutes in (0, 1000000]``). Every option of every sub-command is checked this way,
    or by ``choices`` (``tests/test_cli_values.py`` walks them all)."""

    def convert(text: str) -> Any:
        try:
            return check(text, "", **options)
        except checks.BadValue as err:
            global _bad_value
            _bad_value = err  # --debug shows its traceback (argparse would only print the message)
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = check.__name__
    convert.check = check  # type: ignore[attr-defined]
    convert.options = options  # type: ignore[attr-defined]
    return convert


#: argparse type: an integer in [1, 2**31 - 1].
positive_int = arg(checks.positive_int)


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
    from gea_graph.io import LockError
    from gea_graph.train import CheckpointError
    from gea_graph.train.run import WorkerLost

    return (ValueError, LookupError, OSError, pickle.UnpicklingError, CacheError, RawFileError, CheckpointError,
            LockError, WorkerLost)


def one_line(err: BaseException) -> str:
    """The message of an exception on one line (a ``KeyError``'s without its quotes)."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return text or type(err).__name__


#: The last value an option's check refused (for ``--debug``).
_bad_value: checks.BadValue | None = None


def main(argv: Sequence[str] | None = None) -> int:
    global _bad_value
    words = list(sys.argv[1:] if argv is None else argv)
    command_at = next((i for i, word in enumerate(words) if not word.startswith("-")), len(words))
    debug = bool(os.environ.get("GEA_GRAPH_DEBUG")) or "--debug" in words[:command_at]
    parser = build_parser()
    _bad_value = None
    try:
        args = _parse(parser, argv)
    except SystemExit as stop:  # argparse's one-line errors (exit code 2), --help and --version (0)
        if debug and _bad_value is not None:
            raise _bad_value from None
        return stop.code if isinstance(stop.code, int) else 2
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    if debug:
        return int(args.func(args) or 0)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so that a reader gone away (`| head`) is seen below
        return code
    except BrokenPipeError:
        # The reader of stdout has gone (`gea-graph info --list | head`): stop quietly, as a Unix tool stopped by
        # SIGPIPE does, rather than report an OSError.
        from gea_graph.io import discard_stdout

        discard_stdout()
        return 128 + 13
    except Exception as err:
        if not isinstance(err, user_errors()):
            raise
        print(f"gea-graph {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    # Dotted overrides may follow options (`train R --out X key=value`): argparse leaves them over.
    overrides = [token for token in extra if "=" in token and not token.startswith("-")]
    if overrides and args.command in ("train", "info"):
        for token in overrides:
            try:
                checks.override(token, "")
            except checks.BadValue as err:
                parser.error(f"argument overrides: {err}")
        args.overrides += overrides
        extra = [token for token in extra if token not in overrides]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

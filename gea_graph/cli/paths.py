r"""The one rule of every command that writes: an output never replaces an input, nor another output.

A command calls :func:`refuse_overlap` with its inputs (a checkpoint, a CSV, a recipe file) and the files it is about
to write (``--out``, ``--embeddings``, the files ``--ogb-submission DIR`` or a run folder receives), by option name,
before it loads or writes anything. Paths are compared after resolving links and ``..`` (``os.path.realpath``), and
files that exist are also compared by device and inode (``os.path.samefile``: a hard link is the same file).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

PathLike = str | os.PathLike


def _same(a: PathLike, b: PathLike) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: its resolved path was compared above
        return False


def refuse_overlap(inputs: Mapping[str, PathLike | Iterable[PathLike] | None],
                   outputs: Mapping[str, PathLike | Iterable[PathLike] | None]) -> None:
    r"""Raises :class:`ValueError` (one line naming both options and the path) when a file in :obj:`outputs` is one
    in :obj:`inputs` or another output. Keys name where a path was given (``"--out"``, ``"the checkpoint"``);
    a value is a path, several paths, or ``None`` (not given)."""

    def items(named: Mapping[str, PathLike | Iterable[PathLike] | None]) -> list[tuple[str, Path]]:
        out = []
        for name, value in named.items():
            if value is None:
                continue
            paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
            out += [(name, Path(p)) for p in paths]
        return out

    sources, targets = items(inputs), items(outputs)
    for i, (name, path) in enumerate(targets):
        for source, given in sources:
            if _same(path, given):
                raise ValueError(f"{name} {str(path)!r} is {source} {str(given)!r}: an output never replaces an "
                                 f"input; choose another file")
        for other, given in targets[:i]:
            if _same(path, given):
                raise ValueError(f"{name} {str(path)!r} is also {other} {str(given)!r}: two outputs cannot share a "
                                 f"file; choose another one")

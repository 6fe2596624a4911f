r"""The one rule of every command that writes: an output never replaces an input, nor another output.

A command calls :func:`refuse_overlap` with its inputs (a checkpoint, a CSV, a recipe file) and the files it is about
to write (``--out``, ``--embeddings``, the files ``--ogb-submission DIR`` or a run folder receives), by option name,
before it loads or writes anything. An input is the file it names, links followed (``os.path.realpath``), and the
name itself; an output is its name in its real folder: every file is written to a temporary file and renamed into
place (:mod:`gea_graph.io`), which replaces a link found at that name and never writes through it.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

PathLike = str | os.PathLike


def _place(path: PathLike) -> str:
    # the directory entry a write replaces: the name in its folder, the folder's links and `..` resolved
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _reads(path: PathLike) -> set[str]:
    # what reading an input touches: its name, and the file a link there leads to
    return {_place(path), os.path.realpath(path)}


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
            if _place(path) in _reads(given):
                raise ValueError(f"{name} {str(path)!r} is {source} {str(given)!r}: an output never replaces an "
                                 f"input; choose another file")
        for other, given in targets[:i]:
            if _place(path) == _place(given):
                raise ValueError(f"{name} {str(path)!r} is also {other} {str(given)!r}: two outputs cannot share a "
                                 f"file; choose another one")

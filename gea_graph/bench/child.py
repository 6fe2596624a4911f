r"""Child processes that run the ``gea_graph`` of this process.

A bench records a digest of the code it runs (:func:`gea_graph.bench.runner.code_version`, computed in the bench's
own process) and starts every run as ``python -m gea_graph train ...``. For ``-m`` (and ``-c``) Python puts the
current directory first on ``sys.path``, so from a folder that holds another ``gea_graph`` (a checkout of another
commit, say) the runs would import that one and the digest would name code that never ran. :func:`child_env` puts
this process's package first on ``PYTHONPATH`` and sets ``PYTHONSAFEPATH`` (Python ≥ 3.11) so that the current
directory is not put before it; the environment passes on to the run's own children (DDP workers).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


def gea_graph_command(*args: str) -> list[str]:
    r"""``[python, -m, gea_graph, *args]`` with this process's interpreter (run it with :func:`child_env`)."""
    return [sys.executable, "-m", "gea_graph", *args]


def option_words(options: Iterable[tuple[str, object]], overrides: Iterable[str] = ()) -> list[str]:
    r"""The command-line words of ``(flag, value)`` pairs, skipping ``None`` values and writing floats as ``%g``
    (``30.0`` as ``30``), then ``--set ITEM`` for every recipe override."""
    words: list[str] = []
    for flag, value in options:
        if value is not None:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    for item in overrides:
        words += ["--set", item]
    return words


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    r"""``base`` (default: this process's environment) with this process's ``gea_graph`` first on ``PYTHONPATH``
    and ``PYTHONSAFEPATH=1``."""
    import gea_graph

    env = dict(os.environ if base is None else base)
    top = str(Path(gea_graph.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [top, env.get("PYTHONPATH")]))
    env["PYTHONSAFEPATH"] = "1"
    return env

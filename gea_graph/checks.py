r"""The one way to check a value: command-line options (through :func:`gea_graph.cli.arg`), recipe keys and the
arguments of the public API are all checked here, before any work starts.

Each check takes the value as given (the text of an option, or a recipe's value) and the name it was given under
(``where``: an option such as ``--max-time``, a recipe key such as ``trainer.max_time``, or ``""`` where the caller
adds the name itself, as argparse does), and returns it converted, or raises :class:`BadValue`: one line that names
the value, where it was given and what is allowed, e.g.
``--max-time: 'nan' is not allowed; it must be a finite number of minutes in (0, 1000000]``. The checks of names
the toolkit knows (recipes, suites, datasets, positional encodings) are in :mod:`gea_graph.cli.names`, which may
read the registries; this module imports nothing of the package.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Largest value of a count (threads, jobs, graphs, ...): what a C int holds.
MAX_COUNT = 2 ** 31 - 1
#: Seeds are what numpy and Lightning accept: 0 .. 2**32 - 1.
MAX_SEED = 2 ** 32 - 1
#: Accelerators the toolkit runs on (Lightning's names).
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


class BadValue(ValueError):
    r"""A value outside what its option or key allows (the message names both, and what is allowed)."""


def bad(where: str, value: Any, allowed: str, why: str = "is not allowed") -> BadValue:
    r"""The :class:`BadValue` ``"WHERE: VALUE is not allowed; it must be ALLOWED"``."""
    return BadValue(f"{where + ': ' if where else ''}{value!r} {why}; it must be {allowed}")


def integer(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    r"""An integer (or its text) in ``[low, high]``."""
    allowed = _range("an integer", low, high)
    if isinstance(value, (bool, float)):
        raise bad(where, value, allowed)
    try:
        number = int(value.strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise bad(where, value, allowed) from None
    if (low is not None and number < low) or (high is not None and number > high):
        raise bad(where, value if isinstance(value, str) else number, allowed)
    return number


def positive_int(value: Any, where: str = "", high: int = MAX_COUNT) -> int:
    r"""An integer in ``[1, high]``."""
    return integer(value, where, 1, high)


def non_negative_int(value: Any, where: str = "", high: int = MAX_COUNT) -> int:
    r"""An integer in ``[0, high]``."""
    return integer(value, where, 0, high)


def seed(value: Any, where: str = "") -> int:
    r"""A seed: an integer in ``[0, 2**32 - 1]``."""
    return integer(value, where, 0, MAX_SEED)


def number(value: Any, where: str, low: float | None = None, high: float | None = None, strict_low: bool = False,
           strict_high: bool = False, what: str = "a finite number") -> float:
    r"""A finite number (or its text) in the range given (``strict_*``: the bound itself is excluded)."""
    allowed = _range(what, low, high, strict_low, strict_high)
    if isinstance(value, bool):
        raise bad(where, value, allowed)
    try:
        result = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise bad(where, value, allowed) from None
    if not math.isfinite(result):
        raise bad(where, value, allowed)
    if low is not None and (result < low or (strict_low and result == low)):
        raise bad(where, value, allowed)
    if high is not None and (result > high or (strict_high and result == high)):
        raise bad(where, value, allowed)
    return result


#: The longest wall-clock budget in minutes (about two years): beyond it a cap is a typo, and seconds overflow.
MAX_MINUTES = 10 ** 6


def minutes(value: Any, where: str = "") -> float:
    r"""A wall-clock budget in minutes: a number in (0, :data:`MAX_MINUTES`]."""
    return number(value, where, 0.0, MAX_MINUTES, strict_low=True, what="a finite number of minutes")


def non_negative_minutes(value: Any, where: str = "") -> float:
    r"""A time in minutes that may be 0 (``--stop-after 0``: stop at the first epoch end)."""
    return number(value, where, 0.0, MAX_MINUTES, what="a finite number of minutes")


def fraction(value: Any, where: str = "") -> float:
    r"""A number in ``[0, 1)`` (a dropout rate, Adam's betas)."""
    return number(value, where, 0.0, 1.0, strict_high=True)


def choice(value: Any, where: str, allowed: Sequence[str]) -> str:
    r"""One of :obj:`allowed`."""
    if value not in allowed:
        raise bad(where, value, f"one of {', '.join(allowed)}", why="is not known")
    return value


def int_list(value: Any, where: str = "", item: Callable[[Any, str], int] = seed) -> list[int]:
    r"""A comma-separated list of at least one integer, each checked by :obj:`item` (seeds by default)."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if not value.strip() or any(not part for part in parts):
            raise bad(where, value, "a comma-separated list of integers, e.g. 0,1,2")
    else:
        parts = list(value)
        if not parts:
            raise bad(where, value, "a list of at least one integer")
    items = []
    for part in parts:
        try:
            items.append(item(part, ""))
        except BadValue as err:
            raise bad(where, value, f"a comma-separated list in which each item is {str(err).split('must be ')[-1]}"
                      ) from None
    return items


def unique(values: Iterable[T], where: str, note: Callable[[str], None] | None = None,
           key: Callable[[T], Any] = lambda v: v) -> list[T]:
    r""":obj:`values` without repetitions (first occurrences, in order); ``note`` is told of each one dropped."""
    seen, out = set(), []
    for value in values:
        k = key(value)
        if k in seen:
            if note is not None:
                note(f"{where} gives {value} more than once; it counts once")
            continue
        seen.add(k)
        out.append(value)
    return out


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+@=-]{0,127}")


def name(value: Any, where: str = "") -> str:
    r"""A name that is also one path component (a recipe's ``name``: its runs live in ``OUT/<name>/``): letters,
    digits and ``_ . + @ = -``, not starting with ``.`` or ``-``, at most 128 characters."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise bad(where, value, "one path component: letters, digits and _ . + @ = - (not first: . or -), "
                                "at most 128 characters")
    return value


def _plain_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not any(ord(c) < 32 for c in value)


def text(value: Any, where: str = "") -> str:
    r"""Non-empty text without control characters (a file or folder name as typed)."""
    if not _plain_text(value):
        raise bad(where, value, "a non-empty path without control characters")
    return value


def output_folder(value: Any, where: str = "") -> Path:
    r"""A folder to write into: non-empty, and not an existing file."""
    value = text(value, where)
    if os.path.exists(value) and not os.path.isdir(value):
        raise bad(where, value, "a folder (it names an existing file)", why="is a file")
    return Path(value)


def output_file(value: Any, where: str = "", suffixes: Sequence[str] = ()) -> Path:
    r"""A file to write: non-empty, not an existing folder, ending in one of :obj:`suffixes` when given."""
    value = text(value, where)
    if os.path.isdir(value):
        raise bad(where, value, "a file name (it names an existing folder)", why="is a folder")
    if suffixes and os.path.splitext(value)[1].lower() not in suffixes:
        raise bad(where, value, f"a file name ending in {' or '.join(suffixes)}")
    return Path(value)


def input_file(value: Any, where: str = "") -> str:
    r"""An existing file."""
    value = text(value, where)
    if not os.path.isfile(value):
        raise bad(where, value, "an existing file", why="does not exist" if not os.path.exists(value)
                  else "is not a file")
    return value


def override(value: Any, where: str = "") -> str:
    r"""A recipe override ``section.key=value`` (the value is checked with the recipe)."""
    if not isinstance(value, str) or "=" not in value or not re.fullmatch(r"[A-Za-z_][\w.]*", value.split("=")[0]):
        raise bad(where, value, "of the form section.key=value, e.g. model.hidden=64")
    return value


def accelerator(value: Any, where: str = "") -> str:
    r"""One of :data:`ACCELERATORS` that this machine has (``gpu``/``cuda``: a CUDA device; ``mps``: Apple's)."""
    value = choice(value, where, ACCELERATORS)
    if value in ("auto", "cpu"):  # every machine has them (and the default costs no import of torch)
        return value
    import torch

    mps = getattr(torch.backends, "mps", None)
    present = {"cuda": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    present["gpu"] = present["cuda"] or present["mps"]
    if not present.get(value, True):
        raise bad(where, value, "cpu or auto (this machine has no " + ("CUDA or MPS" if value == "gpu" else value)
                  + " device)", why="is not available")
    return value


def devices(value: Any, where: str = "") -> int | list[int] | str:
    r"""Lightning's devices: ``auto``, a number of devices (``-1``: all), or a comma-separated list of distinct
    device indices (``0,1``)."""
    allowed = "auto, a number of devices >= 1 (-1: all), or distinct device indices such as 0,1"
    text_value = str(value).strip()
    if text_value == "auto":
        return "auto"
    if "," in text_value:
        try:
            indices = [non_negative_int(part, "") for part in text_value.split(",")]
        except BadValue:
            raise bad(where, value, allowed) from None
        if len(set(indices)) != len(indices):
            raise bad(where, value, allowed)
        return indices
    try:
        count = integer(text_value, "", -1, MAX_COUNT)
    except BadValue:
        raise bad(where, value, allowed) from None
    if count == 0:
        raise bad(where, value, allowed)
    return count


def strategy(value: Any, where: str = "") -> str:
    r"""A Lightning strategy name (``auto``, ``ddp``, ``ddp_spawn``, ``fsdp``, ``deepspeed``, ...)."""
    if value == "auto":  # the default: no import of Lightning for it
        return value
    from lightning.pytorch.strategies import StrategyRegistry

    known = ["auto", *StrategyRegistry.available_strategies()]
    if value not in known:
        main = [s for s in ("auto", "ddp", "ddp_spawn", "ddp_find_unused_parameters_true", "fsdp", "deepspeed")
                if s in known]
        raise bad(where, value, f"a Lightning strategy, e.g. {', '.join(main)}", why="is not known")
    return value


def placement(accelerator_name: str, devices_value: Any, where: str = "--devices") -> None:
    r"""Devices that fit the accelerator: on the CPU, a number of processes (not device indices)."""
    import torch

    on_cpu = accelerator_name == "cpu" or (accelerator_name == "auto" and not torch.cuda.is_available())
    if on_cpu and (isinstance(devices_value, list) or devices_value == -1):
        raise bad(where, ",".join(map(str, devices_value)) if isinstance(devices_value, list) else str(devices_value),
                  "a number of processes >= 1 on the CPU (device indices and -1 need a GPU)")


# -- values of a kind (imported when checked: each check costs only when its option is given) ----------------


def tree_depth(value: Any, where: str = "") -> int:
    r"""A TreeNeighbourMatch depth: 2 .. 7 (the benchmark's), up to 16 with ``--allow-large``."""
    return integer(value, where, 2, 16)


def smiles(value: Any, where: str = "") -> str:
    r"""A SMILES string that RDKit parses into a molecule with at least one atom."""
    from rdkit import Chem, RDLogger

    value = str(value)
    RDLogger.DisableLog("rdApp.*")
    try:
        mol = Chem.MolFromSmiles(value) if value.strip() else None
    finally:
        RDLogger.EnableLog("rdApp.*")
    if mol is None or mol.GetNumAtoms() == 0:
        raise bad(where, value, "a SMILES string RDKit can parse, e.g. CCO", why="is not a molecule")
    return value


def smiles_text(value: Any, where: str = "") -> str:
    r"""The text of a molecule to predict: a non-empty SMILES string (whether RDKit parses it is decided per row, so
    that an invalid molecule keeps its row and a reason)."""
    if not isinstance(value, str) or not value.strip():
        raise bad(where, value, "a non-empty SMILES string, e.g. CCO", why="is not a SMILES string")
    return value


def column(value: Any, where: str = "") -> str:
    r"""A column name of a CSV file: non-empty text without control characters."""
    if not _plain_text(value):
        raise bad(where, value, "a column name (non-empty, without control characters)")
    return value


def colour_map(value: Any, where: str = "") -> str:
    r"""A matplotlib colour map name (``Reds``, ``viridis``, ...)."""
    import matplotlib

    if value not in matplotlib.colormaps:
        raise bad(where, value, "a matplotlib colour map, e.g. Reds, viridis, magma", why="is not known")
    return value


def layer_index(value: Any, where: str = "") -> int:
    r"""A layer: 1-based, or negative from the end (not 0); its range is checked against the model."""
    index = integer(value, where, -MAX_COUNT, MAX_COUNT)
    if index == 0:
        raise bad(where, value, "a 1-based layer number, or negative from the end (-1: the last)")
    return index


def torch_device(value: Any, where: str = "") -> str:
    r"""``auto``, ``cpu``, ``cuda`` or ``cuda:N`` of a device this machine has."""
    import torch

    value = str(value)
    if value in ("auto", "cpu"):
        return value
    match = re.fullmatch(r"cuda(?::(\d+))?", value)
    if match is None:
        raise bad(where, value, "auto, cpu, cuda or cuda:N", why="is not a device")
    if not torch.cuda.is_available() or int(match.group(1) or 0) >= torch.cuda.device_count():
        raise bad(where, value, f"auto or cpu, or one of this machine's {torch.cuda.device_count()} CUDA devices",
                  why="is not available")
    return value

def _bound(value: float) -> str:
    # 1000000 rather than 1e+06; small and fractional bounds as %g
    return f"{int(value)}" if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def _range(what: str, low: float | None, high: float | None, strict_low: bool = False,
           strict_high: bool = False) -> str:
    if low is not None and high is not None:
        return f"{what} in {'(' if strict_low else '['}{_bound(low)}, {_bound(high)}{')' if strict_high else ']'}"
    if low is not None:
        return f"{what} {'>' if strict_low else '>='} {_bound(low)}"
    if high is not None:
        return f"{what} {'<' if strict_high else '<='} {_bound(high)}"
    return what

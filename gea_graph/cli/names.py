"""Checks of the names the toolkit knows (recipes, suites, datasets, splits, positional encodings, perf groups), in
the manner of :mod:`gea_graph.checks` (the value and where it was given; :class:`~gea_graph.checks.BadValue`). They
live in the ``cli`` room because they read the registries of the rooms below it; each imports its registry only when
its option is given, so ``gea-graph --help`` stays fast."""

from __future__ import annotations

from typing import Any

from gea_graph.checks import BadValue, bad, choice, text


def recipe_spec(value: Any, where: str = "") -> str:
    r"""A recipe name (in ``models/`` or ``$GEA_GRAPH_RECIPES``) or the path of a recipe file that exists."""
    from gea_graph.train.recipe import RecipeError, resolve_recipe

    value = text(value, where)
    try:
        resolve_recipe(value)
    except RecipeError as err:
        raise bad(where, value, f"a recipe name or file ({err})", why="is not a recipe") from None
    return value


def recipe_list(value: Any, where: str = "") -> list[str]:
    r"""A comma-separated list of recipes (see :func:`recipe_spec`)."""
    items = [part.strip() for part in str(value).split(",")]
    if not str(value).strip() or not all(items):
        raise bad(where, value, "a comma-separated list of recipe names or files")
    if len(items) == 1:
        return [recipe_spec(items[0], where)]
    try:
        return [recipe_spec(item, "") for item in items]
    except BadValue as err:
        raise BadValue(f"{where + ': ' if where else ''}{value!r}: {err}") from None


def suite_name(value: Any, where: str = "") -> str:
    r"""A named benchmark suite (``gea-graph bench --list-suites``)."""
    from gea_graph.bench.suites import SUITES

    return choice(value, where, sorted(SUITES))


def dataset_name(value: Any, where: str = "", tree: bool = False) -> str:
    r"""A built-in dataset (and ``tree``, with a depth given apart, when :obj:`tree`)."""
    from gea_graph.data import DATASETS

    return choice(str(value).lower(), where, [*DATASETS, *(["tree"] if tree else [])])


def split_name(value: Any, where: str = "") -> str:
    r"""A split that some built-in dataset has (the dataset's own are checked when it is known)."""
    from gea_graph.data import DATASETS

    return choice(value, where, list(dict.fromkeys(s for info in DATASETS.values() for s in info.splits)))


def pe_spec(value: Any, where: str = "") -> str:
    r"""A positional-encoding spec (:func:`gea_graph.transforms.parse_pe`, sizes within their bounds)."""
    from gea_graph.transforms import parse_pe

    value = text(value, where)
    try:
        parse_pe(value)
    except ValueError as err:
        raise BadValue(f"{where + ': ' if where else ''}{err}") from None
    return value


def perf_group(value: Any, where: str = "") -> str:
    r"""A group of rows of ``gea-graph perf`` (:func:`gea_graph.bench.perf.suite.row_groups`)."""
    from gea_graph.bench.perf.suite import row_groups

    return choice(value, where, list(row_groups()))


def selfcheck_name(value: Any, where: str = "") -> str:
    r"""A check of ``gea-graph selfcheck`` (``--list``)."""
    from gea_graph.selfcheck import CHECKS

    return choice(value, where, list(CHECKS))


def external_reduction(value: Any, where: str = "") -> str:
    r"""A per-atom score of GEA's attention (:data:`gea_graph.viz.scores.EXTERNAL_REDUCTIONS`)."""
    from gea_graph.viz.scores import EXTERNAL_REDUCTIONS

    return choice(value, where, EXTERNAL_REDUCTIONS)

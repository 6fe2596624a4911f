r"""Search spaces: a recipe's ``sweep:`` block (or ``--space FILE.yaml``) read into Optuna distributions.

A space maps dotted recipe keys (the keys of ``gea-graph train`` overrides) to one distribution each::

    sweep:
      model.hidden: {int: [32, 128], step: 16}          # 32, 48, ..., 128
      optim.lr: {float: [1.0e-4, 3.0e-3], log: true}    # log-uniform
      model.layer_args.external_dropout: {float: [0, 0.5]}
      model.attn: {choice: [softmax, gfsa]}

``int`` takes ``step`` (default 1) or ``log``; ``float`` takes ``step`` or ``log``; ``choice`` takes a list of plain
values. :func:`check_space` reads the recipe with each bound and each choice in turn (the recipe's own checks: the
key must exist, the value must be in its range, the layers must accept it), so a bad space is refused, naming the
key, before any trial; values that fail only in combination are refused when a trial draws them
(:func:`trial_recipe`).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from gea_graph.train.recipe import Recipe, RecipeError, load_recipe, load_yaml

KINDS = ("int", "float", "choice")


class SpaceError(ValueError):
    r"""A search space that cannot be searched (the message names the key)."""


def parse_space(raw: Any, source: str) -> dict[str, BaseDistribution]:
    r"""The distributions of a ``sweep:`` block (:obj:`raw`, a mapping of dotted keys), in its order; raises
    :class:`SpaceError` naming :obj:`source` and the key."""
    if not isinstance(raw, Mapping) or not raw:
        raise SpaceError(f"{source}: the search space must be a non-empty mapping of recipe keys to distributions, "
                         f"e.g. 'model.hidden: {{int: [32, 128], step: 16}}'")
    return {str(key): _distribution(str(key), spec, source) for key, spec in raw.items()}


def _distribution(key: str, spec: Any, source: str) -> BaseDistribution:
    def fail(why: str) -> SpaceError:
        return SpaceError(f"{source}: sweep key '{key}': {why}")

    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise fail("not a dotted recipe key such as model.hidden")
    if key.split(".")[0] in ("sweep", "name", "description", "paper"):
        raise fail("is not a training setting; search over data, model, optim or trainer keys")
    if not isinstance(spec, Mapping):
        raise fail(f"{spec!r} is not a distribution; give {{int: [low, high]}}, {{float: [low, high]}} or "
                   f"{{choice: [a, b, ...]}}")
    kinds = [k for k in KINDS if k in spec]
    if len(kinds) != 1:
        raise fail(f"give exactly one of {', '.join(KINDS)} (got {', '.join(map(str, spec)) or 'none'})")
    kind = kinds[0]
    extra = sorted(set(spec) - {kind, "step", "log"} if kind != "choice" else set(spec) - {kind})
    if extra:
        raise fail(f"unknown option {extra[0]!r} (allowed: {'step, log' if kind != 'choice' else 'none'})")
    if kind == "choice":
        values = spec[kind]
        if not isinstance(values, list) or not values:
            raise fail(f"choice must be a non-empty list, got {values!r}")
        if any(v is not None and not isinstance(v, (bool, int, float, str)) for v in values):
            raise fail("choice values must be plain values (numbers, strings, true/false, null)")
        if len({json.dumps(v) for v in values}) != len(values):
            raise fail(f"choice {values!r} repeats a value")
        return CategoricalDistribution(values)
    bounds = spec[kind]
    number = int if kind == "int" else (int, float)
    if (not isinstance(bounds, list) or len(bounds) != 2
            or any(isinstance(b, bool) or not isinstance(b, number) or not math.isfinite(b) for b in bounds)):
        raise fail(f"{kind} takes [low, high], two finite {'integers' if kind == 'int' else 'numbers'}; "
                   f"got {bounds!r}")
    low, high = bounds
    if low > high:
        raise fail(f"low {low} is above high {high}")
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        raise fail(f"log must be true or false, got {log!r}")
    if log and step is not None:
        raise fail("give step or log, not both")
    if log and low <= 0:
        raise fail(f"log needs low > 0, got {low}")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, number) or not step > 0:
            raise fail(f"step must be a {'positive integer' if kind == 'int' else 'number > 0'}, got {step!r}")
        span = (high - low) / step
        if abs(span - round(span)) > 1e-9:
            raise fail(f"[{low}, {high}] is not a whole number of steps of {step}")
    if kind == "int":
        return IntDistribution(low, high, log=log, step=step or 1)
    return FloatDistribution(float(low), float(high), log=log, step=None if step is None else float(step))


def space_values(dist: BaseDistribution) -> list[Any]:
    r"""The values of a distribution that :func:`check_space` tries: its bounds, or every choice."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    return list(dict.fromkeys([dist.low, dist.high]))


def read_space_file(path: str | os.PathLike) -> dict[str, Any]:
    r"""The raw space of ``--space FILE.yaml``: a mapping of keys to distributions, or a recipe-like file whose
    ``sweep:`` block is that mapping."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = load_yaml(f.read(), str(path))
    except (OSError, UnicodeDecodeError) as err:
        raise SpaceError(f"--space {path}: cannot be read ({err})") from None
    if isinstance(raw, dict) and set(raw) == {"sweep"}:
        raw = raw["sweep"]
    return raw


def override(key: str, value: Any) -> str:
    r"""The ``key=value`` override of one drawn value (JSON is YAML: strings quoted, ``None`` as ``null``)."""
    return f"{key}={json.dumps(value)}"


def trial_recipe(path: str | os.PathLike, params: Mapping[str, Any],
                 overrides: Sequence[str] = ()) -> tuple[Recipe, int]:
    r"""The recipe at :obj:`path` with the sweep's :obj:`overrides`, then a trial's drawn :obj:`params`, checked as
    ``gea-graph train`` checks a recipe (:class:`RecipeError` or :class:`ValueError` when a value does not fit), and
    the parameter count of its model, built once (a layer refusing a combination of values fails here, before any
    data is read)."""
    recipe = load_recipe(path, [*overrides, *(override(k, v) for k, v in params.items())])
    from gea_graph.models import build_model, count_parameters

    return recipe, count_parameters(build_model(recipe.model))


def check_space(path: str | os.PathLike, space: Mapping[str, BaseDistribution], overrides: Sequence[str],
                source: str) -> None:
    r"""Reads the recipe with each bound and each choice of each key (the other keys at the recipe's values) and
    builds its model: a key the recipe does not have, or a value it refuses, raises :class:`SpaceError` naming the
    key, the value and the recipe's reason."""
    for key, dist in space.items():
        for value in space_values(dist):
            try:
                trial_recipe(path, {key: value}, overrides)
            except (RecipeError, ValueError, TypeError, KeyError) as err:
                reason = " ".join(str(err).split())
                raise SpaceError(f"{source}: sweep key '{key}': the value {value!r} does not fit the recipe "
                                 f"({reason})") from None


def distribution_json(space: Mapping[str, BaseDistribution]) -> dict[str, str]:
    r"""A space as JSON text per key (what a study records, to refuse a rerun over another space)."""
    from optuna.distributions import distribution_to_json

    return {key: distribution_to_json(dist) for key, dist in space.items()}


def recipe_space(recipe: Recipe, space_file: str | os.PathLike | None, source: str) -> dict[str, BaseDistribution]:
    r"""The space of a recipe: ``--space FILE`` when given, else its ``sweep:`` block."""
    if space_file is not None:
        return parse_space(read_space_file(space_file), f"--space {space_file}")
    if not recipe.sweep:
        raise SpaceError(f"{source}: the recipe has no sweep: block; add one (e.g. 'sweep: {{optim.lr: {{float: "
                         f"[1.0e-4, 3.0e-3], log: true}}}}') or give --space FILE.yaml")
    return parse_space(recipe.sweep, source)

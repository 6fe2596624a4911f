r"""``gea-graph info RECIPE [overrides]``: build a recipe's model without data, print its layers and, as the last
line, ``params: N``."""
from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("info", help="build a recipe's model (no data) and print it and its size",
                                   description=__doc__)
    parser.add_argument("recipe", help="recipe name (in models/) or path to a recipe YAML")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.hidden=64")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.models import build_model, count_parameters
    from gea_graph.train.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.overrides)
    model = build_model(recipe.model)
    print(f"recipe: {recipe.name} (dataset: {recipe.data.label})")
    print(model)
    print(f"params: {count_parameters(model)}")
    return 0

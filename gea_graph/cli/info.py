r"""``gea-graph info RECIPE [overrides]``: build a recipe's model without data, print its layers and, as the last
line, ``params: N`` (with the published count beside it when the recipe copies a paper's row that prints one:
``params: 490,571 (paper: 490,571)``). ``gea-graph info --list``: every recipe by name, with its dataset and the
paper row it copies."""
from __future__ import annotations

import argparse

from gea_graph import checks
from gea_graph.cli import arg, names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("info", help="build a recipe's model (no data) and print it and its size",
                                   description=__doc__)
    parser.add_argument("recipe", nargs="?", type=arg(names.recipe_spec),
                        help="recipe name (in models/) or path to a recipe YAML")
    parser.add_argument("overrides", nargs="*", default=[], type=arg(checks.override),
                        help="dotted overrides, e.g. model.hidden=64")
    parser.add_argument("--list", action="store_true", help="list the recipes with their datasets and exit")
    parser.set_defaults(func=run, parser=parser)


def list_recipes() -> str:
    r"""The text of ``gea-graph info --list``: a line per recipe (name, dataset with its positional encoding, the
    paper row it copies, else the start of its description), read from the YAML without building anything."""
    from gea_graph.train.recipe import RecipeError, available_recipes, read_recipe

    lines = [f"{'recipe':<40} {'dataset':<24} paper row or description"]
    for name in available_recipes():
        try:
            _, raw = read_recipe(name)
        except RecipeError as err:  # one broken file (a user's ./models) does not hide the others
            lines.append(f"{name:<40} unreadable: {err}")
            continue
        data, paper = raw.get("data") or {}, raw.get("paper") or {}
        dataset = str(data.get("name") or data.get("cls", "?")).rsplit(".", 1)[-1]
        if data.get("pe"):
            dataset += f" ({':'.join(str(data['pe']).split(':')[:2])})"  # lap:10, not its options
        about = paper.get("source") or " ".join(str(raw.get("description", "-")).split())
        lines.append(f"{name:<40} {dataset:<24} {about if len(about) <= 80 else about[:77] + '...'}")
    return "\n".join(lines)


def params_line(count: int, published: int | None = None, rtol: float = 0.0) -> str:
    r"""``params: N``, with ``(paper: M)`` when a published count is given and ``(paper: M, within x%)`` or
    ``(paper: M, off by x%)`` when the paper gives an approximate budget (``rtol > 0``) or the counts differ."""
    line = f"params: {count:,}"
    if published is None:
        return line
    note = f"paper: {published:,}"
    if count != published:
        off = abs(count - published) / published
        note += f", {'within' if off <= rtol else 'off by'} {100 * off:.2g}%"
    return f"{line} ({note})"


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.recipe is not None:
            args.parser.error("--list takes no recipe")
        print(list_recipes())
        return 0
    if args.recipe is None:
        args.parser.error("give a recipe (gea-graph info --list names them)")
    from gea_graph.models import build_model, count_parameters
    from gea_graph.train.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.overrides)
    model = build_model(recipe.model)
    print(f"recipe: {recipe.name} (dataset: {recipe.data.label})")
    print(model)
    paper = recipe.paper
    published = paper.params if paper is not None else None
    print(params_line(count_parameters(model), published, paper.params_rtol if paper is not None else 0.0))
    return 0

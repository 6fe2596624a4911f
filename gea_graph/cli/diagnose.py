"""``gea-graph diagnose``: oversmoothing measures per layer and the GFSA filter response of trained models."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int

_EPILOG = """\
examples:
  gea-graph diagnose runs/graphormer/checkpoints/best.ckpt --dataset zinc --out diag
  gea-graph diagnose runs/graphormer/checkpoints/best.ckpt --compare runs/gfsa/checkpoints/best.ckpt --dataset zinc

writes DIR/layers.csv (per layer: mean pairwise cosine similarity of node representations within a graph, Dirichlet
energy and its normalised form; layer 0 = input of the first layer), DIR/frequency_response.csv (only when a model has
GFSA layers: the filter response h(lambda) = w0 + w1 lambda + wK (lambda + (K-1)(lambda^2 - lambda)) per head, on
[-1, 1] and at the eigenvalues of the attention matrices on the graphs; one left in DIR by an earlier diagnosis is
removed when no model has GFSA) and DIR/diagnostics.png.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="oversmoothing measures per layer (and GFSA filter response) of trained models",
        description="Per-layer cosine similarity and Dirichlet energy of node representations (the oversmoothing "
        "measures of the GFSA paper) and, for GFSA layers, the learned filter's frequency response.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "checkpoint", type=arg(checks.input_file), help="training checkpoint, e.g. RUN/checkpoints/best.ckpt"
    )
    parser.add_argument(
        "--dataset", type=arg(names.dataset_name), required=True, metavar="NAME",
        help="built-in dataset (e.g. zinc)",
    )
    parser.add_argument(
        "--split", type=arg(names.split_name), default="test", help="split to measure on (default: test)"
    )
    parser.add_argument(
        "--root", type=arg(checks.output_folder), default=None,
        help="data root (default: $GEA_GRAPH_DATA, else ./datasets; never the checkpoint's)",
    )
    parser.add_argument(
        "--graphs", type=positive_int, default=256, help="first N graphs of the split (default: 256)"
    )
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument(
        "--compare", type=arg(checks.input_file), metavar="CKPT2",
        help="a second checkpoint, overlaid in the plot and tables",
    )
    parser.add_argument(
        "--out", type=arg(checks.output_folder), default="diagnostics",
        help="output folder (default: ./diagnostics)",
    )
    parser.set_defaults(func=run)


def _name(checkpoint: str, recipe_name: str, taken: set[str]) -> str:
    """A display name: the recipe name, else the run folder; made unique."""
    path = Path(checkpoint).resolve()
    name = recipe_name or (
        path.parent.parent.name if path.parent.name == "checkpoints" else path.stem
    )
    return name if name not in taken else f"{name} ({path.parent.parent.name or path.stem})"


def run(args: argparse.Namespace) -> int:
    from torch_geometric.data import Batch

    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.diagnostics.report import diagnose
    from gea_graph.inference import load_model

    out = Path(args.out)  # checked by its option: not an existing file
    refuse_overlap({"the checkpoint": args.checkpoint, "--compare": args.compare},
                   {"--out": [out / name for name in ("layers.csv", "frequency_response.csv", "diagnostics.png")]})
    models, batches = {}, {}
    for checkpoint in [args.checkpoint] + ([args.compare] if args.compare else []):
        trained = load_model(checkpoint)
        name = _name(checkpoint, trained.recipe.name, set(models))
        # each model sees the same graphs made as its own training graphs were (features, positional encodings)
        graphs = trained.dataset_graphs(args.dataset, args.split, first=args.graphs, root=args.root)
        models[name] = trained.model
        batches[name] = [
            Batch.from_data_list(graphs[i : i + args.batch_size])
            for i in range(0, len(graphs), args.batch_size)
        ]
    paths = diagnose(models, batches, out)
    for kind, path in paths.items():
        print(f"wrote {path} ({kind})")
    earlier = out / "frequency_response.csv"
    if "frequency_response" not in paths and earlier.is_file():  # it would read as these models' table
        earlier.unlink()
        print(f"removed {earlier} (of an earlier diagnosis: no model here has GFSA)")
    _print_summary(paths["layers"])
    return 0


def _print_summary(layers_csv: Path) -> None:
    """First and last layer of every model, from the written table."""
    with layers_csv.open() as handle:
        rows = list(csv.DictReader(handle))
    for name in dict.fromkeys(row["model"] for row in rows):
        own = [row for row in rows if row["model"] == name]
        first, last = own[0], own[-1]
        print(
            f"  {name}: cosine similarity {float(first['cosine_similarity']):.3f} (input) -> "
            f"{float(last['cosine_similarity']):.3f} (layer {last['layer']}); normalised Dirichlet energy "
            f"{float(first['dirichlet_energy_normalised']):.3g} -> {float(last['dirichlet_energy_normalised']):.3g}"
        )

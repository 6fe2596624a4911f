"""``gea-graph viz``: molecules with atoms coloured by a trained model's attention (GEAET paper, Figs. 4 and 8)."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import TYPE_CHECKING

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int

if TYPE_CHECKING:
    from rdkit import Chem

    from gea_graph.viz.pictures import AtomAttention

_EPILOG = """\
examples:
  gea-graph viz runs/quick/checkpoints/best.ckpt --dataset zinc --index 0,5,9 --kind both --out attention.png
  gea-graph viz best.ckpt --smiles "CC(=O)Nc1ccc(O)cc1" "c1ccncc1" --kind external --reduction max --out a.svg

GEA scores (--reduction): received (default) = share of the external units' attention that lands on the atom (the
map normalised over the atoms for every unit, then averaged over units and heads; sums to 1 over the atoms, like the
self-attention score); max = the atom's largest weight over the units; sharpness = 1 - entropy / log S of the atom's
weights over the units. Self-attention score = attention the atom receives (mean over query atoms and heads; padding
and a Graphormer graph token excluded).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "viz",
        help="draw molecules with atoms coloured by a trained model's attention",
        description="Draw molecules (RDKit 2D depiction) with each atom coloured by the attention a trained model "
        "gives it: external attention (GEA), self-attention, or both side by side.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "checkpoint", type=arg(checks.input_file), help="training checkpoint, e.g. RUN/checkpoints/best.ckpt"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--smiles", nargs="+", type=arg(checks.smiles), metavar="SMILES", help="molecules to draw"
    )
    source.add_argument(
        "--dataset", type=arg(names.dataset_name), metavar="NAME",
        help="built-in molecular dataset (e.g. zinc)",
    )
    parser.add_argument(
        "--index", type=arg(checks.int_list, item=checks.non_negative_int), default=[0],
        help="graphs of --dataset to draw (e.g. 0,5,9)",
    )
    parser.add_argument(
        "--split", type=arg(names.split_name), default="test", help="split of --dataset (default: test)"
    )
    parser.add_argument(
        "--root", type=arg(checks.output_folder), default=None,
        help="data root of --dataset (default: $GEA_GRAPH_DATA, else ./datasets; never the checkpoint's)",
    )
    parser.add_argument("--kind", choices=("external", "self", "both"), default="external")
    parser.add_argument(
        "--layer",
        type=arg(checks.layer_index),
        default=-1,
        help="1-based layer, or negative from the end (default: -1)",
    )
    parser.add_argument(
        "--head", type=arg(checks.non_negative_int), default=None,
        help="one head (0-based) instead of the mean over heads",
    )
    parser.add_argument(
        "--reduction", type=arg(names.external_reduction), default="received",
        help="GEA per-atom score: received, max or sharpness (default: received)"
    )
    parser.add_argument(
        "--cmap", type=arg(checks.colour_map), default="Reds", help="matplotlib colour map (default: Reds)"
    )
    parser.add_argument(
        "--shared-scale", action="store_true", help="one colour range per kind for all molecules"
    )
    parser.add_argument("--ncols", type=positive_int, default=None, help="molecules per row")
    parser.add_argument(
        "--out", type=arg(checks.output_file, suffixes=(".png", ".svg")), required=True,
        help="output picture, .png or .svg",
    )
    parser.add_argument(
        "--scores", type=arg(checks.output_file, suffixes=(".csv",)), metavar="CSV",
        help="also write the per-atom scores to this CSV file",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.inference import load_model
    from gea_graph.viz.draw import format_from_path
    from gea_graph.viz.pictures import attention_picture

    refuse_overlap({"the checkpoint": args.checkpoint}, {"--out": args.out, "--scores": args.scores})
    fmt = format_from_path(args.out)
    trained = load_model(args.checkpoint)
    if args.smiles:  # featurised as the model's training set was (its feature mode and PE spec)
        graphs = trained.graphs(args.smiles)
        titles = [f"#{i}" for i in range(len(graphs))]
    else:
        graphs = trained.dataset_graphs(args.dataset, args.split, args.index, root=args.root)
        titles = [f"{args.dataset} {args.split} #{i}" for i in args.index]
    picture, records = attention_picture(
        trained.model,
        graphs,
        args.kind,
        layer=args.layer,
        head=args.head,
        reduction=args.reduction,
        titles=titles,
        fmt=fmt,
        cmap=args.cmap,
        ncols=args.ncols,
        shared_scale=args.shared_scale,
    )
    path = picture.save(args.out)
    count = f"{len(graphs)} molecule{'s' if len(graphs) != 1 else ''}"
    print(f"wrote {path} ({picture.size[0]}x{picture.size[1]} px, {count})")
    for record, mol, title in zip(records, picture.mols, picture.titles):
        top = int(record.scores.argmax())
        symbol = mol.GetAtomWithIdx(top).GetSymbol()
        print(
            f"  {title} [{record.kind}]: top atom {top} ({symbol}), score {record.scores[top]:.4g}"
        )
    if args.scores:
        print(f"wrote {_write_scores(Path(args.scores), records, picture.titles, picture.mols)}")
    return 0


def _write_scores(
    path: Path, records: list[AtomAttention], titles: list[str], mols: list[Chem.Mol]
) -> Path:
    """One row per atom of every panel."""
    from gea_graph.io import atomic_write, ensure_folder

    ensure_folder(path.parent)
    with atomic_write(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["panel", "smiles", "kind", "layer", "head", "reduction", "atom", "symbol", "score"]
        )
        for record, title, mol in zip(records, titles, mols):
            head = "mean" if record.head is None else record.head
            for atom, score in enumerate(record.scores):
                symbol = mol.GetAtomWithIdx(atom).GetSymbol()
                writer.writerow(
                    [
                        title,
                        record.smiles,
                        record.kind,
                        record.layer,
                        head,
                        record.reduction,
                        atom,
                        symbol,
                        f"{score:.6g}",
                    ]
                )
    return path

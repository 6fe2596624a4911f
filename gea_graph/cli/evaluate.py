r"""``gea-graph evaluate CKPT [CKPT ...] --dataset NAME --split test [--root DIR]``: the recipe's metric of trained
models on a dataset's split, with the dataset's official evaluator where one exists (OGB's for PCQM4M/PCQM4Mv2,
LRGB's average precision and MAE, PCQM-Contact's Hits@k and both MRRs). Prints one line per model (and one for
the ensemble of several) and writes the result to ``--out`` (JSON)."""
from __future__ import annotations

import argparse
from pathlib import Path

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int

_EPILOG = """\
examples:
  gea-graph evaluate runs/quick/checkpoints/best.ckpt --dataset zinc --split test
  gea-graph evaluate runs/pcqm/seed0/checkpoints/best.ckpt --dataset pcqm4mv2 --split val --out pcqm.json

The data is read from --root (else $GEA_GRAPH_DATA, else ./datasets), never from a checkpoint's recipe, and made
with the checkpoint's featurisation (feature mode, PE spec). Evaluating a checkpoint on the test split of its own
dataset gives the test metric recorded in that run's result.json, unless the run trained with data.subset: its
result.json scored the first data.subset graphs of the split, evaluate scores all of them (a note says so).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("evaluate", help="score trained models on a dataset split (official evaluators)",
                                   description=__doc__, epilog=_EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", type=arg(checks.input_file), metavar="CKPT",
                        help="training checkpoints")
    parser.add_argument("--dataset", required=True, type=arg(names.dataset_name), metavar="NAME",
                        help="built-in dataset (e.g. zinc)")
    parser.add_argument("--split", required=True, type=arg(names.split_name), metavar="SPLIT",
                        help="split to score (e.g. test)")
    parser.add_argument("--root", default=None, type=arg(checks.output_folder), metavar="DIR",
                        help="data root (default: $GEA_GRAPH_DATA, else ./datasets; never the checkpoint's)")
    parser.add_argument("--out", default="evaluation.json", type=arg(checks.output_file, suffixes=(".json",)),
                        metavar="FILE.json",
                        help="where the result is written (default: evaluation.json)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="graphs per forward pass (default: the recipe's evaluation batch size)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the models run (default: auto = cuda when available)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.cli.predict import load_models, resolve_device
    from gea_graph.inference.evaluate import evaluate, subset_notes, summary_lines
    from gea_graph.io import ensure_folder, write_json

    refuse_overlap({"the checkpoint": args.checkpoints}, {"--out": args.out})
    models = load_models(args.checkpoints, resolve_device(args.device))
    result = evaluate(models, args.dataset, args.split, args.root, args.batch_size)
    ensure_folder(Path(args.out).parent)
    write_json(args.out, result)
    for line in summary_lines(result) + subset_notes(models, args.dataset, args.split):
        print(line)
    print(f"wrote {args.out}")
    return 0

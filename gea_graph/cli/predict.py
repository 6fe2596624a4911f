r"""``gea-graph predict CKPT [CKPT ...]``: predictions of a trained model (or the mean of several) for SMILES, a CSV
file or a dataset's split, in input order, featurised exactly as the model's training set was.

Writes ``--out`` (CSV: the id column or ``row``, ``smiles``, one column per target named as in training, with
several checkpoints ``<target>_std`` and with ``--individual`` ``<target>_model<k>``, then ``error``) and prints one
line, ``N predicted, K invalid``. An invalid input (RDKit cannot parse it, an atom outside the model's vocabulary)
keeps its row with empty predictions and the reason in ``error``; the exit code is 0, or 2 with ``--strict``.
"""
from __future__ import annotations

import argparse
import os

from gea_graph import checks
from gea_graph.cli import arg, names, positive_int
from gea_graph.cli.paths import refuse_overlap

_EPILOG = """\
examples:
  gea-graph predict runs/quick/checkpoints/best.ckpt --smiles CCO "c1ccccc1O" --out preds.csv
  gea-graph predict best.ckpt --csv molecules.csv --smiles-column smiles --id-column id --out preds.csv
  gea-graph predict best.ckpt --dataset zinc --split test --out preds.csv --embeddings emb.npy
  gea-graph predict --bench runs/zinc geaet-zinc --smiles CCO --out preds.csv --individual
  gea-graph predict best.ckpt --dataset pcqm4mv2 --split test-dev --ogb-submission submission/

A large CSV is read, featurised, predicted and written in chunks ($GEA_GRAPH_CHUNK_ROWS rows, default 10,000), so
memory stays bounded. Models trained with GEA's batch-wide softmax (norm_scope: batch) always predict with their
recipe's evaluation batch size (a warning says so when --batch-size asks for another).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict", help="predict with trained models (SMILES, a CSV or a dataset split)", description=__doc__,
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", type=arg(checks.input_file), metavar="CKPT",
                        help="training checkpoints (several: an ensemble), e.g. RUN/checkpoints/best.ckpt")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--smiles", nargs="+", type=arg(checks.smiles_text), metavar="S", help="molecules to predict")
    source.add_argument("--csv", type=arg(checks.input_file), metavar="FILE",
                        help="a CSV file (.csv or .csv.gz) with a SMILES column")
    source.add_argument("--dataset", type=arg(names.dataset_name), metavar="NAME",
                        help="a built-in dataset (with --split), read from "
                        "$GEA_GRAPH_DATA (else ./datasets), never from a checkpoint's recipe")
    parser.add_argument("--smiles-column", type=arg(checks.column), metavar="COL", help="the SMILES column of --csv")
    parser.add_argument("--id-column", type=arg(checks.column), metavar="COL",
                        help="a column of --csv copied to the output as each row's id "
                        "(default: the row number, column 'row')")
    parser.add_argument("--split", type=arg(names.split_name), metavar="SPLIT",
                        help="the split of --dataset (e.g. test)")
    parser.add_argument("--out", type=arg(checks.output_file), metavar="preds.csv", help="the output CSV file")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="graphs per forward pass (default: the recipe's evaluation batch size)")
    parser.add_argument("--max-nodes", type=positive_int, default=None, metavar="N",
                        help="the largest input accepted, in atoms/nodes (default 1,000; beyond it a row is invalid)")
    parser.add_argument("--max-edges", type=positive_int, default=None, metavar="E",
                        help="the largest input accepted, in directed edges (default 20,000)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the models run (default: auto = cuda when available)")
    parser.add_argument("--embeddings", type=arg(checks.output_file, suffixes=(".npy",)), metavar="FILE.npy",
                        help="also write each graph's representation before the head, in input order (NaN rows "
                        "for invalid inputs; [N, d], or [N, M, d] for M checkpoints)")
    parser.add_argument("--strict", action="store_true", help="an invalid input is an error (exit code 2)")
    parser.add_argument("--bench", nargs=2, type=arg(checks.text), metavar=("DIR", "RECIPE"),
                        help="the checkpoints of every complete seed of RECIPE in a gea-graph bench folder DIR")
    parser.add_argument("--individual", action="store_true",
                        help="also one column per model and target, <target>_model<k>")
    parser.add_argument("--ogb-submission", type=arg(checks.output_folder), metavar="DIR",
                        help="with --dataset pcqm4mv2 --split test-dev|test-challenge: write OGB's submission "
                        "file to DIR (PCQM4Mv2Evaluator.save_test_submission)")
    parser.set_defaults(func=run)


def resolve_device(name: str) -> str:
    r"""``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without a GPU is refused."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return name


def checkpoint_paths(checkpoints: list[str], bench: list[str] | None) -> list[str]:
    r"""The CKPT arguments and the checkpoints of ``--bench DIR RECIPE``."""
    from gea_graph.inference.predict import bench_checkpoints

    paths = list(checkpoints) + (bench_checkpoints(*bench) if bench else [])
    if not paths:
        raise ValueError("give at least one checkpoint (CKPT ...) or --bench DIR RECIPE")
    return paths


def load_models(paths: list[str], device: str) -> list:
    r"""The models of the checkpoints :obj:`paths`, on :obj:`device`."""
    from gea_graph.inference import load_model

    return [load_model(path, map_location="cpu").to(device) for path in paths]


def run(args: argparse.Namespace) -> int:
    from gea_graph.inference.predict import (
        csv_source,
        dataset_source,
        predict_to_files,
        smiles_source,
        write_pcqm4mv2_submission,
    )

    # the checked paths come as Paths; the writers name them in messages as typed
    for key in ("out", "embeddings", "ogb_submission"):
        if getattr(args, key) is not None:
            setattr(args, key, str(getattr(args, key)))
    if args.csv is not None and args.smiles_column is None:
        raise ValueError("--csv needs --smiles-column COL (the column holding the SMILES)")
    for option, value in (("--smiles-column", args.smiles_column), ("--id-column", args.id_column)):
        if value is not None and args.csv is None:
            raise ValueError(f"{option} goes with --csv FILE")
    if (args.dataset is None) != (args.split is None):
        raise ValueError("--dataset NAME and --split SPLIT go together")
    if args.ogb_submission is not None and (args.dataset or "").lower() != "pcqm4mv2":
        raise ValueError("--ogb-submission needs --dataset pcqm4mv2 --split test-dev (or test-challenge)")
    if args.out is None and args.ogb_submission is None:
        raise ValueError("--out preds.csv is required (the output file)")
    out = args.out
    if out is None:  # a submission only: the per-row table goes beside it
        out = os.path.join(args.ogb_submission, f"preds-{args.split}.csv")
    paths = checkpoint_paths(args.checkpoints, args.bench)
    submission = None if args.ogb_submission is None else \
        os.path.join(args.ogb_submission, f"y_pred_pcqm4m-v2_{args.split}.npz")  # OGB's name for it
    refuse_overlap({"the checkpoint": paths, "--csv": args.csv},
                   {"--out": out, "--embeddings": args.embeddings, "--ogb-submission": submission})
    from gea_graph.data.featurizers import SizeBounds
    bounds = SizeBounds(**{k: v for k, v in (("max_nodes", args.max_nodes), ("max_edges", args.max_edges)) if v})
    models = load_models(paths, resolve_device(args.device))
    if args.smiles is not None:
        source = smiles_source(args.smiles, models, bounds)
    elif args.csv is not None:
        source = csv_source(args.csv, args.smiles_column, args.id_column, models, bounds=bounds)
    else:
        source = dataset_source(args.dataset, args.split, models)
    if args.ogb_submission is not None:  # checked before any work: OGB takes only its own split sizes
        from gea_graph.inference.predict import PCQM4MV2_SUBMISSION_SIZES

        need = PCQM4MV2_SUBMISSION_SIZES.get(args.split)
        if need is None or source.total != need:
            raise ValueError("--ogb-submission: OGB takes submissions for test-dev "
                             f"({PCQM4MV2_SUBMISSION_SIZES['test-dev']:,}"
                             f" graphs) and test-challenge ({PCQM4MV2_SUBMISSION_SIZES['test-challenge']:,}); split "
                             f"{args.split!r} here has {source.total:,} graphs")
    summary = predict_to_files(models, source, out, args.batch_size, args.embeddings, args.individual,
                               args.strict, keep_values=args.ogb_submission is not None)
    written = [out] + ([args.embeddings] if args.embeddings else [])
    if args.ogb_submission is not None:
        import numpy as np

        written.append(str(write_pcqm4mv2_submission(np.concatenate(summary.values)[:, 0], args.split,
                                                     args.ogb_submission)))
    first = ""
    if summary.first_error is not None:
        row, smiles, reason = summary.first_error
        first = f"; first invalid: row {row} {smiles!r}: {reason}"
    print(f"{summary.line()} (wrote {', '.join(written)}{first})")
    return 0

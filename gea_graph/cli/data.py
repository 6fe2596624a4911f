r"""``gea-graph data``: build datasets and list what is available.

``gea-graph data prepare NAME [--pe lap:8,rw:20] [--root DIR] [--depth R]`` builds every split of a dataset (raw files
from the mirror or the web, MD5-checked; positional encodings computed once and cached) and prints a summary: graphs
per split, mean nodes and edges, target statistics and the time taken.

``gea-graph data list`` shows every dataset, its task, its source and where it would come from now (``processed``,
``raw``, ``mirror``, ``generated`` or ``download``).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from gea_graph import checks
from gea_graph.cli import arg, names

if TYPE_CHECKING:
    import torch


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="build and list datasets", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    prepare = sub.add_parser("prepare", help="build a dataset and print a summary")
    prepare.add_argument("name", type=arg(names.dataset_name, tree=True),
                         help="dataset name (see `gea-graph data list`), or `tree` with --depth")
    prepare.add_argument("--pe", type=arg(names.pe_spec), default=None,
                         help="positional encodings, e.g. lap:8,rw:20 or lap:8,rw:20,spd:20")
    prepare.add_argument("--root", type=arg(checks.output_folder), default=None,
                         help="data root (default: $GEA_GRAPH_DATA, else ./datasets)")
    prepare.add_argument("--depth", type=arg(checks.tree_depth), default=None,
                         help="tree depth for `tree` (2..7; up to 16 with --allow-large)")
    prepare.add_argument("--allow-large", action="store_true",
                         help="allow a tree depth above 7 (its size, stated when refused, grows as 4^depth)")
    prepare.add_argument("--force", action="store_true", help="rebuild the processed cache")
    prepare.add_argument("--skip-invalid", action="store_true",
                         help="molecules: skip SMILES RDKit cannot parse and list them in a report file")
    prepare.set_defaults(func=run_prepare)
    listing = sub.add_parser("list", help="list datasets, their sources and local availability")
    listing.add_argument("--root", type=arg(checks.output_folder), default=None,
                         help="data root (default: $GEA_GRAPH_DATA, else ./datasets)")
    listing.set_defaults(func=run_list)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _target_summary(y: torch.Tensor) -> str:
    import torch

    if y is None or y.numel() == 0:
        return "no targets"
    if not y.is_floating_point():
        counts = torch.bincount(y.flatten().clamp(min=0))
        return f"{int((counts > 0).sum())} classes, largest class {counts.max().item() / y.numel():.1%}"
    y = y.double()
    labelled = y[~torch.isnan(y)]
    if labelled.numel() == 0:
        return "unlabelled (NaN)"
    return (f"mean {labelled.mean():.4g}, std {labelled.std(unbiased=False):.4g}, "
            f"min {labelled.min():.4g}, max {labelled.max():.4g}" +
            (f", {y.isnan().sum().item()} NaN" if torch.isnan(y).any() else ""))


def _split_summary(ds) -> str:
    n = len(ds)
    if n == 0:
        return "0 graphs"
    sample = [ds[i] for i in range(0, n, max(1, n // 2000))]  # bounded cost on the 512k-graph trees
    nodes = sum(d.num_nodes for d in sample) / len(sample)
    edges = sum(d.num_edges for d in sample) / len(sample)
    y = ds.y if hasattr(ds, "y") and getattr(ds, "y", None) is not None else None
    if y is None and hasattr(sample[0], "edge_label"):
        import torch

        y = torch.cat([d.edge_label for d in sample]).float()
    return f"{n:,} graphs, mean {nodes:.1f} nodes, {edges:.1f} edges; targets: {_target_summary(y)}"


def run_prepare(args: argparse.Namespace) -> int:
    from gea_graph.data import DATASETS, get_dataset

    name = args.name
    kwargs = {}
    if args.depth is not None and name != "tree":
        raise checks.bad("--depth", args.depth, f"given with `tree` only ({name} has its own depth or none)",
                         why="does not apply")
    if name == "tree" and args.depth is None:
        raise checks.bad("name", name, "given with --depth R (2..7)", why="needs a depth")
    if name == "tree":
        from gea_graph.data.tree import MAX_DEPTH, too_large

        if args.depth > MAX_DEPTH and not args.allow_large:  # the library's advice names its Python argument
            raise ValueError(too_large(args.depth, "pass --allow-large"))
        kwargs["depth"] = args.depth
        if args.allow_large:
            kwargs["allow_large"] = True
        splits = ("train", "test")
    else:
        splits = DATASETS[name].splits
    if args.skip_invalid:
        kwargs["skip_invalid"] = True
    start = time.perf_counter()
    datasets = {split: get_dataset(name, args.root, split, pe=args.pe, force_reload=args.force and i == 0, **kwargs)
                for i, split in enumerate(splits)}
    elapsed = time.perf_counter() - start
    first = next(iter(datasets.values()))
    print(f"{name}" + (f" (pe {args.pe})" if args.pe else "") + f": {first.processed_dir}")
    for split, ds in datasets.items():
        print(f"  {split:<15} {_split_summary(ds)}")
    print(f"  time: {elapsed:.1f} s")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from gea_graph.data import DATASETS, availability

    print(f"{'name':<16} {'available':<10} {'task':<42} source")
    for name, info in DATASETS.items():
        print(f"{name:<16} {availability(name, args.root):<10} {info.task:<42} {info.source}")
    return 0

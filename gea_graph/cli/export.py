r"""``gea-graph export CKPT --out model.pt2``: a trained model as a ``torch.export`` program, which runs with torch
(and PyG to build its inputs) alone: ``torch.export.load("model.pt2").module()(inputs, num_graphs,
max_num_nodes)``. The numbers of nodes, edges and graphs are dynamic; the input signature is in the file's metadata
(``extra_files={"gea_graph.json": ""}``). The program is checked against the model on batches of other shapes (a
one-node graph, a graph without edges) before the file is written. An architecture that cannot be exported is
refused in one line saying which and why."""
from __future__ import annotations

import argparse

from gea_graph import checks
from gea_graph.cli import arg


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="export a trained model with torch.export (.pt2)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=arg(checks.input_file), metavar="CKPT",
                        help="training checkpoint, e.g. RUN/checkpoints/best.ckpt")
    parser.add_argument("--out", required=True, type=arg(checks.output_file, suffixes=(".pt2",)), metavar="model.pt2",
                        help="the file to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gea_graph.cli.paths import refuse_overlap
    from gea_graph.inference import load_model
    from gea_graph.inference.export import check_replay, export_model, save_export

    refuse_overlap({"the checkpoint": args.checkpoint}, {"--out": args.out})
    trained = load_model(args.checkpoint)
    program, metadata = export_model(trained)
    worst = check_replay(program, trained, [i["name"] for i in metadata["inputs"]])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_export(program, metadata, args.out)
    names = ", ".join(i["name"] for i in metadata["inputs"])
    # ":.1g" printed a replay without difference as "within 0"
    agreement = "equal to the model" if worst == 0 else f"within {worst:.1e} of the model"
    print(f"wrote {args.out}: {metadata['architecture']}, inputs {names} + num_graphs, max_num_nodes; replay on "
          f"other batch shapes {agreement}")
    if metadata["batch_dependent"]:
        print(f"note: this model normalises GEA over the whole batch (norm_scope: batch), so a graph's output "
              f"depends on its batch-mates; its recipe evaluated batches of {metadata['eval_batch_size']} graphs "
              f"(metadata: batch_dependent, eval_batch_size)")
    return 0

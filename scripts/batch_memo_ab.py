"""Training steps with what a batch's layers share found once a batch (the code) against once a layer call (before).

    GEA_GRAPH_MIRROR=../shared/data python scripts/batch_memo_ab.py [--recipes R ...] [--repeats 20] [--threads 1]

Two things are found once a batch (:class:`gea_graph.nn.batch_memo.LastBatchMemo`) and were found at every call:

* the transpose of GCN's sparse adjacency for its backward product (before: :func:`torch.sparse.mm`'s own backward,
  which converts the matrix again in every layer);
* the graph-size classes of the packed CPU attention kernel (before: read from ``ptr`` in every layer's forward and
  backward).

For each recipe: one model and one batch (:func:`gea_graph.bench.perf.training.recipe_batch`: ZINC recipes, the first
``trainer.batch_size`` graphs of the ZINC training split built with the recipe's data settings in the data root;
Peptides-func recipes, the 128 graphs of ``peptides_batch``). The two forms alternate step by step in one process (same
weights, optimiser and batch, order flipped every repeat) after one warm-up step each; prints the median step of each
and their ratio. Used for docs/performance.md, "Found once a batch".
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from gea_graph.bench.perf.training import (
    _training_step,
    ab_arguments,
    interleaved_medians,
    recipe_batch,
)
from gea_graph.nn import mpnn
from gea_graph.nn.attention import packed

RECIPES = ("gcn-zinc-cpu", "gcn-geanet-zinc-cpu", "geaet-zinc-cpu", "gps-zinc-cpu", "gcn-peptides-func-cpu",
           "gcn-geanet-peptides-func-cpu", "geaet-peptides-func-cpu")


def _per_call(h: torch.Tensor, adj: mpnn._Adjacency) -> torch.Tensor:
    return torch.sparse.mm(adj.matrix, h)  # autograd's own backward: the transpose converted at every call


def main() -> None:
    args = ab_arguments(__doc__.split("\n\n")[0], RECIPES, 20)
    memo = packed._batch_size_classes

    def per_batch() -> None:
        if "apply" in vars(mpnn._AdjacencyProduct):  # back to torch.autograd.Function.apply
            del mpnn._AdjacencyProduct.apply
        packed._batch_size_classes = memo

    def per_call() -> None:
        mpnn._AdjacencyProduct.apply = staticmethod(_per_call)
        packed._batch_size_classes = SimpleNamespace(get=packed._size_classes)

    try:
        for name in args.recipes:
            batch, note = recipe_batch(name)
            ms = interleaved_medians(_training_step(name, batch), {"batch": per_batch, "call": per_call},
                                     args.repeats)
            ours, before = ms["batch"] * 1e3, ms["call"] * 1e3
            print(f"{name}: once a batch {ours:.1f} ms, once a call {before:.1f} ms a step, ratio {ours / before:.3f} "
                  f"({batch.num_graphs} graphs, {batch.num_nodes} nodes, {args.threads} thread(s), median of "
                  f"{args.repeats}{'; ' + note if note else ''})")
    finally:
        per_batch()


if __name__ == "__main__":
    main()

"""Training steps with GCN and GIN aggregating by one sparse product (the CPU default of :class:`gea_graph.nn.GCNLayer`
and :class:`gea_graph.nn.GINLayer`) and by PyG's message passing (``edge_index``, and GCN's edge weights), interleaved.

    GEA_GRAPH_MIRROR=../shared/data python scripts/gcn_aggregation_ab.py [--recipes R ...] [--repeats 6] [--threads 1]

For each recipe, one model and one batch (:func:`gea_graph.bench.perf.training.recipe_batch`: for the Peptides-func
recipes the 128 real training graphs of the perf row ``MPNN+GEANet step``, for ZINC recipes the first ``batch_size``
training graphs); the two forms alternate step by step in the same process (same weights, optimiser and batch, order
flipped every repeat) after one warm-up step each. Prints the median step of each and their ratio. The batch is the
same tensor every step, so the sparse form builds its matrix once here; a training run builds it once a batch (about
7 ms on the Peptides-func batch).
"""
from __future__ import annotations

from gea_graph.bench.perf.training import (
    _training_step,
    ab_arguments,
    interleaved_medians,
    recipe_batch,
)
from gea_graph.nn import mpnn

RECIPES = ("gcn-peptides-func-cpu", "gcn-geanet-peptides-func-cpu", "geaet-peptides-func-cpu")


def main() -> None:
    args = ab_arguments(__doc__.split("\n\n")[0], RECIPES, 6)
    sparse_rule = mpnn._sparse_aggregation

    def use(rule):
        def put() -> None:
            mpnn._sparse_aggregation = rule
        return put

    try:
        for name in args.recipes:
            batch, note = recipe_batch(name)
            ms = interleaved_medians(_training_step(name, batch),
                                     {"sparse": use(sparse_rule), "messages": use(lambda x: False)}, args.repeats)
            sparse, messages = ms["sparse"] * 1e3, ms["messages"] * 1e3
            print(f"{name}: sparse product {sparse:.0f} ms, message passing {messages:.0f} ms a step, ratio "
                  f"{sparse / messages:.3f} ({batch.num_graphs} graphs, {batch.num_nodes} nodes, {args.threads} "
                  f"thread(s), median of {args.repeats}{'; ' + note if note else ''})")
    finally:
        mpnn._sparse_aggregation = sparse_rule


if __name__ == "__main__":
    main()

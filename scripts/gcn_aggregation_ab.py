"""Training steps with GCN and GIN aggregating by one sparse product (the CPU default of :class:`gea_graph.nn.GCNLayer`
and :class:`gea_graph.nn.GINLayer`) and by PyG's message passing (``edge_index``, and GCN's edge weights), interleaved.

    GEA_GRAPH_MIRROR=../shared/data python scripts/gcn_aggregation_ab.py [--recipes R ...] [--repeats 6] [--threads 1]

For each recipe, one model and one batch (:func:`gea_graph.bench.perf.training.recipe_batch`: for the Peptides-func
recipes the 128 real training graphs of the perf row ``MPNN+GEANet step``, for ZINC recipes the first ``batch_size``
training graphs); the two forms alternate step by step in the same process (same weights, optimiser and batch, order flipped every repeat) after one warm-up step each. Prints
the median step of each and their ratio. The batch is the same tensor every step, so the sparse form builds its
matrix once here; a training run builds it once a batch (about 7 ms at this size).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from gea_graph.bench.perf.training import _training_step, recipe_batch
from gea_graph.nn import mpnn

RECIPES = ("gcn-peptides-func-cpu", "gcn-geanet-peptides-func-cpu", "geaet-peptides-func-cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sparse_rule = mpnn._sparse_aggregation
    forms = {"sparse product": sparse_rule, "message passing": lambda x: False}
    try:
        for name in args.recipes:
            batch, note = recipe_batch(name)
            step = _training_step(name, batch)
            times: dict[str, list[float]] = {form: [] for form in forms}
            for rule in forms.values():
                mpnn._sparse_aggregation = rule
                step()
            for i in range(args.repeats):
                for form in (list(forms) if i % 2 == 0 else list(forms)[::-1]):
                    mpnn._sparse_aggregation = forms[form]
                    start = time.perf_counter()
                    step()
                    times[form].append(time.perf_counter() - start)
            sparse, messages = (statistics.median(times[form]) * 1e3 for form in forms)
            print(f"{name}: sparse product {sparse:.0f} ms, message passing {messages:.0f} ms a step, ratio "
                  f"{sparse / messages:.3f} ({batch.num_graphs} graphs, {batch.num_nodes} nodes, {args.threads} "
                  f"thread(s), median of {args.repeats}{'; ' + note if note else ''})")
    finally:
        mpnn._sparse_aggregation = sparse_rule


if __name__ == "__main__":
    main()

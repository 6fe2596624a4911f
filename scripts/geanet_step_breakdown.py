"""Where the time of an MPNN+GEANet training step goes, next to the MPNN step it is compared with.

    GEA_GRAPH_MIRROR=../shared/data python scripts/geanet_step_breakdown.py [--recipes GEANET MPNN] [--repeats 7] \
        [--threads 1]

By default on 128 real Peptides-func training graphs with LapPE-10
(:func:`gea_graph.bench.perf.training.peptides_batch`, one fixed batch in one process: the parts' costs, not the
steps of a training run, which the perf row ``MPNN+GEANet step [Peptides-func, batch 128]`` times) and the two models
of that row,
``gcn-geanet-peptides-func-cpu`` (GCN + GEANet, 5 layers of d = 128, 8 GEA heads of 16 units) and
``gcn-peptides-func-cpu`` (GCN); ``--recipes gcn-geanet-zinc-cpu gcn-zinc-cpu`` takes the ZINC pair of the
``zinc-cpu-10min`` suite on its first training batch (:func:`gea_graph.bench.perf.training.recipe_batch`). Times
forward + backward of each part, taken from the models the recipes build: a layer's GCN branch, its GEANet branch and
the GEA unit inside it, the branch's dropout and residual sum (ours and PyTorch's), its BatchNorm, a whole GCN block of
the MPNN model, the node encoders (with the positional-encoding encoder where the GEANet recipe has one) and both whole
training steps. Each part is called in turn, interleaved, ``--repeats`` times after one warm-up call; the table gives
the median of each (wall clock, milliseconds). The last lines say what the parts imply for the row's ratio. The
heap's thresholds are set as in the perf suite (:func:`gea_graph.train.memory.steady_heap_thresholds`).
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gea_graph.bench.perf.training import GEANET_RECIPE, MPNN_RECIPE, _training_step, recipe_batch
from gea_graph.models import build_model
from gea_graph.nn.dropout import dropout_add
from gea_graph.train.memory import steady_heap_thresholds
from gea_graph.train.recipe import load_recipe

BLOCK = "GCN block of the MPNN model (conv, act, dropout + residual, BatchNorm)"


def _fwd_bwd(fn: Callable[[], torch.Tensor], leaves: list[torch.Tensor]) -> Callable[[], None]:
    def call() -> None:
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))
        for t in leaves:
            t.grad = None
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs=2, default=[GEANET_RECIPE, MPNN_RECIPE], metavar=("GEANET", "MPNN"),
                        help="a GCN+GEANet recipe and its GCN recipe")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    steady_heap_thresholds()  # as the perf suite does

    geanet_recipe, mpnn_recipe = args.recipes
    batch, note = recipe_batch(geanet_recipe)
    torch.manual_seed(0)
    geanet_model = build_model(load_recipe(geanet_recipe).model).train()
    gcn_model = build_model(load_recipe(mpnn_recipe).model).train()
    layer, block = geanet_model.layers[0], gcn_model.layers[0]
    n, d = batch.num_nodes, layer.channels
    x = torch.randn(n, d, requires_grad=True)
    h = torch.randn(n, d, requires_grad=True)
    p = layer.gea.dropout
    ei, b, g = batch.edge_index, batch.batch, batch.num_graphs
    parts = {
        "GCN+GEANet layer (whole)": _fwd_bwd(lambda: layer(x, ei, None, b, num_graphs=g), [x]),
        "  GCN branch (GCN conv)": _fwd_bwd(lambda: layer.mpnn(x, ei, None), [x]),
        "  GEANet branch (GEA, dropout + residual, BatchNorm)": _fwd_bwd(lambda: layer.gea(x, ei, None, b, g), [x]),
        "    GEA unit": _fwd_bwd(lambda: layer.gea.attention(x, b, num_graphs=g), [x]),
        f"    dropout (p={p}) + residual, ours (dropout_add)": _fwd_bwd(lambda: dropout_add(h, x, p), [x, h]),
        f"    dropout (p={p}) + residual, torch (F.dropout, +)": _fwd_bwd(lambda: x + F.dropout(h, p), [x, h]),
        "    BatchNorm": _fwd_bwd(lambda: layer.gea.norm(x, b, g), [x]),
        BLOCK: _fwd_bwd(lambda: block(x, ei, None, b, g), [x]),
        "node encoders, GCN+GEANet model": _fwd_bwd(lambda: geanet_model.encode_nodes(batch), []),
        "node encoders, GCN model": _fwd_bwd(lambda: gcn_model.encode_nodes(batch), []),
        "training step, GCN+GEANet": _training_step(geanet_recipe, batch),
        "training step, GCN": _training_step(mpnn_recipe, batch),
    }
    for call in parts.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in parts}
    for i in range(args.repeats):
        order = list(parts.items())
        for name, call in (order if i % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"{batch.num_graphs} graphs, {n} nodes ({note or 'registry data'}); {args.threads} thread(s), median of "
          f"{args.repeats}, forward + backward")
    print("| part | ms |\n|---|---:|")
    for name, value in ms.items():
        print(f"| {name} | {value:.1f} |")
    layers = len(geanet_model.layers)
    step_ours, step_ref = ms["training step, GCN+GEANet"], ms["training step, GCN"]
    fixed = ms[f"    dropout (p={p}) + residual, ours (dropout_add)"] + ms["    BatchNorm"]
    encoders = ms["node encoders, GCN+GEANet model"] - ms["node encoders, GCN model"]
    print(f"\nstep ratio {step_ours / step_ref:.2f}; GEANet branch / GCN block "
          f"{ms['  GEANet branch (GEA, dropout + residual, BatchNorm)'] / ms[BLOCK]:.2f}")
    print(f"with a GEA unit that cost nothing, the {layers} branches' dropout + residual + BatchNorm and the node "
          f"encoders' difference would still give a ratio of {(step_ref + layers * fixed + encoders) / step_ref:.2f}")


if __name__ == "__main__":
    main()

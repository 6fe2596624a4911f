"""Where the time of one global-attention training step goes, on the batch of the perf rows' attention group.

    GEA_GRAPH_MIRROR=../shared/data python scripts/attention_step_profile.py [--attn softmax] [--impl packed] \
        [--steps 5] [--rows 15] [--threads 1]

Builds the batch of ``packed attention [Peptides-func, batch 128]`` (:func:`gea_graph.bench.perf.data.layer_input`:
128 real Peptides-func training graphs, 96 channels, 4 heads of 24), times ``--steps`` calls of the attention module's
forward, ``sum`` and backward after one warm-up call (median, milliseconds), then runs the same steps under
``torch.profiler`` and prints its table of ATen operators and autograd nodes by self CPU time (totals over the steps).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from torch.profiler import profile

from gea_graph.bench.perf.attention import CHANNELS, GRAPHS, HEADS
from gea_graph.bench.perf.data import layer_input
from gea_graph.nn.attention import ATTENTIONS, ATTN_IMPLS, AttentionPlan, attention_resolver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attn", default="softmax", choices=ATTENTIONS)
    parser.add_argument("--impl", default="packed", choices=ATTN_IMPLS)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=15, help="rows of the profiler table")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    inp = layer_input("Peptides-func", CHANNELS, torch.device("cpu"), count=GRAPHS)
    counts = torch.bincount(inp.batch, minlength=inp.num_graphs).numpy()
    ptr = torch.tensor(np.concatenate([[0], np.cumsum(counts)]))
    torch.manual_seed(0)
    module = attention_resolver(args.attn, CHANNELS, HEADS, impl=args.impl)
    x = inp.x.detach().clone().requires_grad_(True)

    def step() -> None:
        plan = AttentionPlan(ptr, x.size(0), int(counts.max()), counts, batch=inp.batch)
        module(x, plan).sum().backward()
        x.grad = None
        for p in module.parameters():
            p.grad = None

    step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(f"{args.attn} ({args.impl}), {inp.num_graphs} graphs, {x.size(0)} nodes, {args.threads} thread(s): "
          f"{statistics.median(times) * 1e3:.1f} ms a step (median of {args.steps})")
    with profile() as prof:
        for _ in range(args.steps):
            step()
    print(f"torch.profiler, {args.steps} steps:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()

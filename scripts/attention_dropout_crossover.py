"""Where attention dropout on CPU stops paying for grouped blocks: packed rows vs grouped blocks by graph size.

    python scripts/attention_dropout_crossover.py [--threads 1] [--repeats 7]

With attention dropout in training the packed kernel cannot use the CPU flash kernel (it has no dropout) and runs the
explicit math once per graph size; the grouped path runs SDPA, with its own dropout, once per block of graphs of
similar size. Forward + backward of :class:`~gea_graph.nn.attention.MultiheadAttention` (64 channels, 4 heads,
dropout 0.2, train mode) on random batches whose graph sizes are uniform in ``[n/2, n]``, both implementations
interleaved, median of ``--repeats``. :data:`gea_graph.nn.attention.multihead.GROUPED_DROPOUT_MAX_NODES` is where
the ratio crosses 1.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from gea_graph.nn.attention.multihead import GROUPED_DROPOUT_MAX_NODES, MultiheadAttention
from gea_graph.nn.attention.plan import AttentionPlan

#: (largest graph n, graphs per batch); sizes uniform in [n/2, n].
CASES = ((38, 32), (64, 32), (96, 64), (128, 64), (192, 128))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"{args.threads} thread(s), median of {args.repeats}, forward + backward; "
          f"GROUPED_DROPOUT_MAX_NODES = {GROUPED_DROPOUT_MAX_NODES}")
    print("| graph sizes | batch | packed ms | grouped ms | grouped / packed |")
    print("|---|---:|---:|---:|---:|")
    for largest, count in CASES:
        ms = _time_case(largest, count, args.repeats)
        print(f"| {largest // 2}-{largest} | {count} | {ms['packed']:.1f} | {ms['grouped']:.1f} | "
              f"{ms['grouped'] / ms['packed']:.2f} |")


def _time_case(largest: int, count: int, repeats: int) -> dict[str, float]:
    sizes = torch.randint(largest // 2, largest + 1, (count, ))
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    num_nodes = int(ptr[-1])
    x = torch.randn(num_nodes, 64, requires_grad=True)
    modules = {impl: MultiheadAttention(64, 4, dropout=0.2, impl=impl).train() for impl in ("packed", "grouped")}

    def run(impl: str) -> None:
        modules[impl](x, AttentionPlan(ptr, num_nodes)).sum().backward()

    times: dict[str, list[float]] = {impl: [] for impl in modules}
    for impl in modules:  # warm-up
        run(impl)
    for _ in range(repeats):
        for impl in modules:
            start = time.perf_counter()
            run(impl)
            times[impl].append(time.perf_counter() - start)
    return {impl: statistics.median(t) * 1e3 for impl, t in times.items()}


if __name__ == "__main__":
    main()

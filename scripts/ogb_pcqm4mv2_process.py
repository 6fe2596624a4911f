"""Run OGB's own, unmodified PCQM4Mv2 processing (``ogb.lsc.PygPCQM4Mv2Dataset(root)``) on a folder in OGB's raw
layout, e.g. a replica from ``scripts/make_pcqm4mv2_replica.py``:

    python scripts/ogb_pcqm4mv2_process.py ROOT

A thin front end of :func:`gea_graph.bench.replica.ogb_pcqm4mv2`, which says why a wrapper is needed (OGB 1.3.6 calls
``torch.load`` without ``weights_only``; torch >= 2.6 refuses its files unless their classes are admitted). Its
processed cache is ``ROOT/pcqm4m-v2/processed/geometric_data_processed.pt``; delete it to process again.

Measure it with ``scripts/measure_build.py``, e.g.::

    python scripts/measure_build.py --label ogb --disk ROOT/pcqm4m-v2/processed/geometric_data_processed.pt \\
        --json build.jsonl -- python scripts/ogb_pcqm4mv2_process.py ROOT
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gea_graph.bench.replica import ogb_pcqm4mv2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, metavar="ROOT", help="folder holding pcqm4m-v2/ in OGB's raw layout")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    dataset, split = ogb_pcqm4mv2(args.root)
    sizes = ", ".join(f"{name} {len(index):,}" for name, index in split.items())
    print(f"OGB PygPCQM4Mv2Dataset: {len(dataset):,} graphs ({sizes}) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

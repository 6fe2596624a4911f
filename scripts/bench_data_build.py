"""Time to build ZINC (12k molecules, all three splits) with LapPE-8 and RWPE-20 from the raw files, in a fresh
temporary data root (target: under 30 s on 2 CPU cores).

    python scripts/bench_data_build.py [--pe lap:8,rw:20]

Raw files come from $GEA_GRAPH_MIRROR (../shared/data beside the checkout when unset and present) or the web.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pe", default="lap:8,rw:20")
    args = parser.parse_args()
    mirror = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not os.environ.get("GEA_GRAPH_MIRROR") and mirror.is_dir():
        os.environ["GEA_GRAPH_MIRROR"] = str(mirror)

    from gea_graph.data import ZINC

    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        sizes = {split: len(ZINC(root, split, pe=args.pe)) for split in ("train", "val", "test")}
        total = time.perf_counter() - start
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"ZINC {sizes} with pe={args.pe}: {total:.1f} s from raw files, all splits (target < 30 s; "
          f"{os.cpu_count()} CPUs, load average {load})")


if __name__ == "__main__":
    main()

"""Write a full-size PCQM4Mv2 replica in OGB's raw layout, for measuring dataset builds at the real scale.

    python scripts/make_pcqm4mv2_replica.py OUT_ROOT [--rows 3746620] [--sample PATH]

writes ``OUT_ROOT/pcqm4m-v2/{raw/data.csv.gz, split_dict.pt, RELEASE_v1.txt}``, which both
``gea_graph.data.PCQM4Mv2(root=OUT_ROOT)`` and OGB's own ``ogb.lsc.PygPCQM4Mv2Dataset(root=OUT_ROOT)`` read unchanged
(OGB 1.3.6 under torch >= 2.6 needs ``scripts/ogb_pcqm4mv2_process.py``). Rows: the mirrored 2k sample's molecules
repeated cyclically; splits: OGB's sizes, scaled proportionally for a smaller ``--rows``. A thin front end of
:func:`gea_graph.bench.replica.make_replica`; its module documents the layout, the rows and the atomic writing.

To measure OGB's processing on a fraction of the full size, make a smaller replica (e.g. ``--rows 374662`` for 10%)
and scale its time and memory linearly (OGB keeps every graph of the dataset in one Python list).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from gea_graph.bench.replica import FULL_ROWS, SAMPLE, make_replica


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_root", type=Path, metavar="OUT_ROOT")
    parser.add_argument("--rows", type=int, default=FULL_ROWS, help=f"rows to write (default {FULL_ROWS:,})")
    parser.add_argument("--sample", type=Path, default=None,
                        help=f"sample CSV with columns smiles,homo (default $GEA_GRAPH_MIRROR/{SAMPLE})")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        summary = make_replica(args.out_root, args.rows, args.sample)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        sys.exit(f"error: {error}")
    print(f"rows {summary['rows']:,}: " + ", ".join(f"{k} {v:,}" for k, v in summary["splits"].items()))
    for path, size in summary["files"].items():
        print(f"wrote {path} ({size:,} bytes)")
    print(f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

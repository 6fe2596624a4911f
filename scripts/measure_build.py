"""Measure a dataset build command: wall time, peak memory of its whole process tree, bytes on disk, exit status.

    python scripts/measure_build.py --label NAME --disk PATH [--json OUT.jsonl] [--interval 0.1] -- COMMAND...

runs ``COMMAND`` (stdin from /dev/null: a prompt fails instead of hanging; stdout and stderr pass through) and
prints one line per measurement, then appends them as one JSON record (a line) to ``--json``: ``wall_s``,
``peak_pss_bytes`` (the peak of the summed PSS of ``COMMAND`` and all its descendants, sampled every ``--interval``
seconds), ``peak_rss_bytes`` (the peak RSS of the largest single process of the tree), ``disk_bytes`` (the files
under ``--disk`` afterwards), ``exit_status`` (``COMMAND``'s, negative: killed by that signal; this script exits with
it too, 128 + signal). A thin front end of :func:`gea_graph.bench.measure.measure`, whose module describes the
method; this script makes itself a child subreaper, so a descendant whose parent exits stays in the tree.

Measuring OGB's PCQM4Mv2 processing against ours on a replica (see ``scripts/make_pcqm4mv2_replica.py`` and
``scripts/ogb_pcqm4mv2_process.py``; use two roots so that the processed caches stay apart)::

    python scripts/make_pcqm4mv2_replica.py /data/replica-ours
    python scripts/make_pcqm4mv2_replica.py /data/replica-ogb
    python scripts/measure_build.py --label ours-pcqm4mv2 --json build.jsonl \\
        --disk /data/replica-ours/pcqm4m-v2/processed -- gea-graph data prepare pcqm4mv2 --pe spd:20:paths=5 \\
        --root /data/replica-ours
    python scripts/measure_build.py --label ogb-pcqm4mv2 --json build.jsonl \\
        --disk /data/replica-ogb/pcqm4m-v2/processed -- python scripts/ogb_pcqm4mv2_process.py /data/replica-ogb

To measure OGB on a fraction of the full size (when the full size does not fit in memory or time), make a smaller
replica with ``make_pcqm4mv2_replica.py ROOT --rows N`` (OGB's split sizes are scaled to N) and scale the numbers
by 3,746,620 / N, saying so: OGB holds every graph in one Python list, so its time and peak memory grow about
linearly in the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from gea_graph.bench.measure import become_subreaper, measure, reap_orphans


def _human(n: int) -> str:
    return f"{n:,} bytes ({n / 2**30:.2f} GiB)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit("error: give the command to measure after '--', e.g. "
                 "measure_build.py --label x --disk DIR -- python build.py")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s --label NAME --disk PATH [--json OUT] [--interval S] "
                                           "-- COMMAND...")
    parser.add_argument("--label", required=True, help="name of this measurement in the output")
    parser.add_argument("--disk", type=Path, required=True, help="folder (or file) whose bytes to count afterwards")
    parser.add_argument("--json", type=Path, default=None, help="append the record as one JSON line to this file")
    parser.add_argument("--interval", type=float, default=0.1, help="memory sampling interval in seconds")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]

    become_subreaper()
    try:
        result = measure(args.label, command, args.disk, args.interval)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        sys.exit(f"error: {error}")
    reap_orphans()
    tag = f"[{result.label}]"
    print(f"{tag} wall_s {result.wall_s:.2f}")
    print(f"{tag} peak_pss_bytes {_human(result.peak_pss_bytes)}: process tree, sum of PSS, "
          f"{result.samples} samples every {result.interval_s} s, up to {result.peak_processes} processes")
    print(f"{tag} peak_rss_bytes {_human(result.peak_rss_bytes)}: largest single process")
    print(f"{tag} disk_bytes {_human(result.disk_bytes)} under {result.disk_path}")
    print(f"{tag} exit_status {result.exit_status}")
    print(f"{tag} load_average {result.load_average_before} before, {result.load_average_after} after, "
          f"on {result.cpus} CPUs")
    if args.json is not None:
        # Imported only now: gea_graph.data imports torch, and the measuring process must stay small while it
        # measures (a child forked from a large parent starts with the parent's resident size in its ru_maxrss).
        from gea_graph.io import append_to

        with append_to(args.json) as f:
            f.write(json.dumps(asdict(result)) + "\n")
    code = result.exit_status
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())

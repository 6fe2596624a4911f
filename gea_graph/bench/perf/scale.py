r"""The ``scale`` rows of the performance suite: the scaled-down version of the full-size PCQM4Mv2 measurement.

A fresh replica of :attr:`~gea_graph.bench.perf.core.Settings.scale_rows` molecules (:func:`gea_graph.bench.replica.
make_replica`, OGB's raw layout and split sizes) is written into a temporary folder and copied to a second root, so
that the two processed caches never mix. Each build runs in its own subprocess under
:func:`gea_graph.bench.measure.measure` (wall time, peak summed PSS of the process tree, peak RSS of its largest
process, bytes of the processed folder):

* ours: ``PCQM4Mv2(root, "train", pe="spd:20:paths=5")`` (every split into one store, Graphormer's shortest paths
  included, in ``$GEA_GRAPH_WORKERS`` forked workers, default the cores this process may use);
* reference: OGB's own ``PygPCQM4Mv2Dataset(root)`` (:func:`gea_graph.bench.replica.ogb_pcqm4mv2`; one process,
  featurisation only: it computes no shortest paths).

Then both loaders run in this process on our built train split (batch 256, shuffled, 2 workers, the shortest-path
fields included): our :class:`~gea_graph.data.GraphLoader` (whole batches gathered from the store) and PyG's
:class:`~torch_geometric.loader.DataLoader` (graph by graph, collated), each for at least 1.5 epochs' worth of batches
after a warm-up batch.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gea_graph.bench.child import child_env
from gea_graph.bench.measure import Measurement, load_average, measure
from gea_graph.bench.perf.core import Row, Settings, Target
from gea_graph.bench.replica import make_replica
from gea_graph.data.store import build_workers

#: The positional encoding of the build rows: Graphormer's shortest paths (distances up to 20, paths of 5 edges).
SCALE_PE = "spd:20:paths=5"
#: The loader rows' settings, as the performance issue fixes them.
LOADER_BATCH = 256
LOADER_WORKERS = 2
#: Batches timed per loader, in epochs of the train split.
LOADER_EPOCHS = 1.5
#: Our loader's absolute target (graphs/s).
LOADER_TARGET = 10_000

_OURS = "import sys\nfrom gea_graph.data import PCQM4Mv2\nPCQM4Mv2(sys.argv[1], 'train', pe=sys.argv[2])\n"
_OGB = "import sys\nfrom gea_graph.bench.replica import ogb_pcqm4mv2\nogb_pcqm4mv2(sys.argv[1])\n"


def _build(label: str, code: str, root: Path) -> Measurement:
    result = measure(label, [sys.executable, "-c", code, str(root), SCALE_PE], root / "pcqm4m-v2" / "processed",
                     env=child_env())  # the same gea_graph as this process
    if result.exit_status != 0:
        raise RuntimeError(f"the {label} build of {root} exited with status {result.exit_status}")
    return result


def loader_graphs_per_second(loader, batches: int) -> float:
    r"""Graphs per second that ``loader`` yields over ``batches`` batches after one warm-up batch (which starts the
    workers); a new epoch (new workers) begins whenever one ends."""
    it = iter(loader)
    next(it)
    graphs = done = 0
    start = time.perf_counter()
    while done < batches:
        for batch in it:
            graphs += batch.num_graphs
            done += 1
            if done == batches:
                break
        else:
            it = iter(loader)
    seconds = time.perf_counter() - start
    del it  # its workers exit
    return graphs / seconds


def _mib(n: int) -> float:
    return n / 2**20


def scale_rows(settings: Settings) -> list[Row]:
    r"""The build rows (time, peak memory, bytes on disk: ours vs OGB's processing) and the loader rows (our
    GraphLoader vs PyG's DataLoader, and ours against :data:`LOADER_TARGET`) on a fresh replica of
    ``settings.scale_rows`` molecules (see the module doc)."""
    from torch_geometric.loader import DataLoader

    from gea_graph.data import GraphLoader, PCQM4Mv2

    rows = settings.scale_rows
    name = f"PCQM4Mv2 build ({SCALE_PE}), {rows:,} rows"
    with tempfile.TemporaryDirectory(prefix="gea-graph-perf-scale-") as tmp:
        ours_root, ogb_root = Path(tmp) / "ours", Path(tmp) / "ogb"
        make_replica(ours_root, rows)
        shutil.copytree(ours_root, ogb_root)
        ours = _build("ours", _OURS, ours_root)
        ogb = _build("ogb", _OGB, ogb_root)
        workers = build_workers()
        out = [
            # The targets (time <= 0.5x, memory <= 0.25x OGB's) are for the full 3.7M rows (measured with
            # scripts/measure_build.py on a full-size replica); at a few thousand rows every process's start-up
            # (imports, worker pool) weighs more than the data, so these rows are informational.
            Row(name, ours.wall_s, ogb.wall_s, "s", None,
                f"fresh replica in subprocesses; ours with {SCALE_PE} in {workers} workers, OGB's "
                f"PygPCQM4Mv2Dataset featurises only (1 process); load average {ours.load_average_before[0]:.1f} → "
                f"{ogb.load_average_after[0]:.1f} on {ours.cpus} cores; the targets (≤ 0.5 time, ≤ 0.25 memory) "
                f"are for the full size: scripts/measure_build.py on a full-size replica"),
            Row(f"{name} · peak memory", _mib(ours.peak_pss_bytes), _mib(ogb.peak_pss_bytes), "MiB", None,
                f"peak of the summed PSS of the process tree (sampled every {ours.interval_s} s; ours up to "
                f"{ours.peak_processes} processes); peak RSS of the largest process: ours "
                f"{_mib(ours.peak_rss_bytes):.0f} MiB, OGB {_mib(ogb.peak_rss_bytes):.0f} MiB; each process "
                f"starts with a few hundred MiB of imports (torch, PyG), which dominate at few rows"),
            Row(f"{name} · bytes on disk", _mib(ours.disk_bytes), _mib(ogb.disk_bytes), "MiB", None,
                "files under pcqm4m-v2/processed (ours: the store with the shortest paths; OGB: "
                "geometric_data_processed.pt)"),
        ]

        dataset = PCQM4Mv2(ours_root, "train", pe=SCALE_PE)
        kwargs = {"batch_size": LOADER_BATCH, "shuffle": True, "num_workers": LOADER_WORKERS}
        ours_loader, pyg_loader = GraphLoader(dataset, **kwargs), DataLoader(dataset, **kwargs)
        batches = math.ceil(LOADER_EPOCHS * len(ours_loader))
        before = load_average()[0]
        ours_rate = loader_graphs_per_second(ours_loader, batches)
        pyg_rate = loader_graphs_per_second(pyg_loader, batches)
        loader = f"GraphLoader graphs/s (batch {LOADER_BATCH}, {LOADER_WORKERS} workers, spd fields)"
        note = (f"{len(dataset):,} train graphs, {batches} batches per side (≥ {LOADER_EPOCHS} epochs, shuffled) "
                f"after a warm-up batch; reference torch_geometric.loader.DataLoader (graph by graph); load "
                f"average {before:.1f} → {load_average()[0]:.1f} on {os.cpu_count()} cores")
        out += [Row(loader, ours_rate, pyg_rate, "graphs/s", None, note),
                Row(f"{loader} · absolute", ours_rate, None, "graphs/s", Target(">=", LOADER_TARGET, on="ours"),
                    f"{len(dataset):,} train graphs of the replica")]
        del dataset, ours_loader, pyg_loader
    return out

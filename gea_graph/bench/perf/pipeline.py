r"""Pipeline rows of the performance suite: shortest paths, the ZINC dataset build, and the
end-to-end training throughput of the ZINC GEAET recipe against PyG's GPS example model
(``models/pyg-gps-zinc.yaml``)."""
from __future__ import annotations

import os
import statistics
from functools import partial

import networkx as nx
import torch
from torch_geometric.data import Data

from gea_graph.bench.perf.core import Row, Settings, Target, timed
from gea_graph.bench.perf.data import ZINC_PE, build_zinc, real_graphs


def _nx_lengths(graph: nx.Graph) -> dict:
    return dict(nx.all_pairs_shortest_path_length(graph))


def shortest_path_rows(settings: Settings) -> list[Row]:
    r"""Our ``ShortestPathDistance`` transform vs :func:`networkx.all_pairs_shortest_path_length`
    on Peptides-func graphs (ms per graph; each side repeated ``3`` times (quick) or ``5``,
    alternating per graph; median of the passes). Ours starts from the PyG ``Data``; networkx gets a prebuilt
    ``nx.Graph`` and produces distances only. Two rows: ours with the first 5 edges of a shortest path per pair
    (Graphormer's edge encoding; the target), and ours with distances only (``max_path=0``, what networkx
    computes; no target)."""
    from gea_graph.transforms import ShortestPathDistance

    graphs, note = real_graphs("Peptides-func", settings.spd_graphs)
    with_paths = ShortestPathDistance(max_path=5)  # the path length of the PCQM4M(v2) Graphormer recipes
    distances = ShortestPathDistance(max_path=0)
    nx_graphs = []
    for g in graphs:
        G = nx.Graph()
        G.add_nodes_from(range(g.num_nodes))
        G.add_edges_from(g.edge_index.t().tolist())
        nx_graphs.append(G)
    plain = [Data(edge_index=g.edge_index, num_nodes=g.num_nodes) for g in graphs]
    passes = 3 if settings.quick else 5
    cpu = torch.device("cpu")
    for transform in (with_paths, distances):
        transform(plain[0].clone())  # warm-up (imports, first-call caches)
    totals: dict[str, list[float]] = {"paths": [], "distances": [], "networkx": []}
    for _ in range(passes):
        t = dict.fromkeys(totals, 0.0)
        for g, G in zip(plain, nx_graphs):
            t["paths"] += timed(partial(with_paths, g.clone()), cpu)
            t["networkx"] += timed(partial(_nx_lengths, G), cpu)
            t["distances"] += timed(partial(distances, g.clone()), cpu)
        for key, value in t.items():
            totals[key].append(value)
    n = len(plain)
    ms = {key: statistics.median(values) / n * 1e3 for key, values in totals.items()}
    base = "; ".join(filter(None, [f"{n} graphs", note]))
    return [Row("shortest paths [Peptides-func]", ms["paths"], ms["networkx"], "ms/graph", Target("<=", 0.1),
                f"{base}; ours: distances and the first 5 edges of a shortest path per pair"),
            Row("shortest paths [Peptides-func] · distances only", ms["distances"], ms["networkx"], "ms/graph",
                None, f"{base}; ours with max_path=0: distances, as networkx")]


def dataset_build_rows(settings: Settings) -> list[Row]:
    r"""Seconds to build ZINC (all 12k graphs, from the raw mirror files: featurisation, LapPE-8,
    RWPE-20, caching) into a fresh temporary root; absolute target ≤ 30 s. The build becomes the
    suite's ZINC (see :mod:`gea_graph.bench.perf.data`)."""
    build = build_zinc()
    sizes = sum(len(ds) for ds in build.splits.values())
    return [Row(f"dataset build [ZINC, {ZINC_PE}]", build.seconds, None, "s",
                Target("<=", 30.0, on="ours"),
                f"{sizes} graphs, fresh temporary root; {build.cpu_seconds:.1f} CPU-s; "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")]


def throughput_rows(settings: Settings) -> list[Row]:
    r"""Training throughput (graphs/s: next batch, forward, backward and optimiser step, data loading included, over
    ``train_steps`` steps of each side after 3 warm-up steps) of the ZINC GEAET recipe vs PyG's GPS example network
    (:class:`~gea_graph.models.PyGGPS`, recipe ``pyg-gps-zinc``), on the same ZINC training loader (the suite's ZINC
    build, batch size of the recipe), in a fresh process, one step of each side at a time, alternating, the order
    flipped after every pair (:func:`~gea_graph.bench.perf.throughput.measure_in_fresh_process`)."""
    from gea_graph.bench.perf.data import zinc
    from gea_graph.bench.perf.throughput import measure_in_fresh_process

    got = measure_in_fresh_process(zinc().root, settings.train_steps, str(settings.device))
    return [Row("training throughput [ZINC GEAET recipe vs PyG GPS example]", float(got["ours"]),
                float(got["reference"]), "graphs/s", Target(">=", 0.8),
                f"{settings.train_steps} steps each, fresh process, single steps alternating; {got['note']}")]

r"""Pipeline rows of the performance suite: shortest paths, the ZINC dataset build, and the
end-to-end training throughput of the ZINC GEAET recipe against PyG's GPS example model."""
from __future__ import annotations

import os
import statistics
from functools import partial

import networkx as nx
import torch
from torch import Tensor
from torch.nn import BatchNorm1d, Embedding, Linear, Module, ModuleList, ReLU, Sequential
from torch_geometric.data import Data
from torch_geometric.nn import GINEConv, GPSConv, global_add_pool

from gea_graph.bench.perf import Row, Settings, Target, timed
from gea_graph.bench.perf_data import ZINC_PE, build_zinc, real_graphs

#: Random-walk steps of the RWPE the GPS example model reads.
RWPE_STEPS = 20


def _nx_lengths(graph: nx.Graph) -> dict:
    return dict(nx.all_pairs_shortest_path_length(graph))


def shortest_path_rows(settings: Settings) -> list[Row]:
    r"""Our ``ShortestPathDistance`` transform vs :func:`networkx.all_pairs_shortest_path_length`
    on Peptides-func graphs (ms per graph; each side repeated ``3`` times (quick) or ``5``,
    alternating per graph; median of the passes). Ours starts from the PyG ``Data`` and produces
    distances *and* paths; networkx gets a prebuilt ``nx.Graph`` and produces distances only."""
    from gea_graph.transforms import ShortestPathDistance

    graphs, note = real_graphs("Peptides-func", settings.spd_graphs)
    transform = ShortestPathDistance(max_path=5)  # the path length of the recorded runs (docs/performance.md)
    nx_graphs = []
    for g in graphs:
        G = nx.Graph()
        G.add_nodes_from(range(g.num_nodes))
        G.add_edges_from(g.edge_index.t().tolist())
        nx_graphs.append(G)
    plain = [Data(edge_index=g.edge_index, num_nodes=g.num_nodes) for g in graphs]
    passes = 3 if settings.quick else 5
    cpu = torch.device("cpu")
    transform(plain[0].clone())  # warm-up (imports, first-call caches)
    totals_ours: list[float] = []
    totals_ref: list[float] = []
    for _ in range(passes):
        t_ours = t_ref = 0.0
        for g, G in zip(plain, nx_graphs):
            data = g.clone()
            t_ours += timed(partial(transform, data), cpu)
            t_ref += timed(partial(_nx_lengths, G), cpu)
        totals_ours.append(t_ours)
        totals_ref.append(t_ref)
    n = len(plain)
    return [Row("shortest paths [Peptides-func]", statistics.median(totals_ours) / n * 1e3,
                statistics.median(totals_ref) / n * 1e3, "ms/graph", Target("<=", 0.1),
                "; ".join(filter(None, [f"{n} graphs", note])))]


def dataset_build_rows(settings: Settings) -> list[Row]:
    r"""Seconds to build ZINC (all 12k graphs, from the raw mirror files: featurisation, LapPE-8,
    RWPE-20, caching) into a fresh temporary root; absolute target ≤ 30 s. The build becomes the
    suite's ZINC (see :mod:`gea_graph.bench.perf_data`)."""
    build = build_zinc()
    sizes = sum(len(ds) for ds in build.splits.values())
    return [Row(f"dataset build [ZINC, {ZINC_PE}]", build.seconds, None, "s",
                Target("<=", 30.0, on="ours"),
                f"{sizes} graphs, fresh temporary root; {build.cpu_seconds:.1f} CPU-s; "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")]


class GPSExample(Module):
    r"""Our own equivalent of PyG's ``examples/graph_gps.py`` ZINC model: node embedding (width
    ``channels - pe_dim``) concatenated with ``Linear(BatchNorm(RWPE))`` (width ``pe_dim``), edge
    embedding, ``num_layers`` × ``GPSConv(GINEConv(MLP), heads=4, attention dropout 0.5)``,
    add-pooling and an MLP ``64 → 32 → 16 → 1``. Categorical features of any number of columns
    are embedded by a sum of per-column embeddings (ZINC here carries OGB atom/bond features)."""

    def __init__(self, atom_dims: list[int], bond_dims: list[int], channels: int = 64,
                 pe_dim: int = 8, walk_length: int = RWPE_STEPS, num_layers: int = 10) -> None:
        super().__init__()
        self.atom = ModuleList(Embedding(d, channels - pe_dim) for d in atom_dims)
        self.bond = ModuleList(Embedding(d, channels) for d in bond_dims)
        self.pe_norm = BatchNorm1d(walk_length)
        self.pe_lin = Linear(walk_length, pe_dim)
        self.convs = ModuleList(
            GPSConv(channels, GINEConv(Sequential(Linear(channels, channels), ReLU(),
                                                  Linear(channels, channels))),
                    heads=4, attn_kwargs={"dropout": 0.5})
            for _ in range(num_layers))
        self.head = Sequential(Linear(channels, channels // 2), ReLU(),
                               Linear(channels // 2, channels // 4), ReLU(),
                               Linear(channels // 4, 1))

    def forward(self, x: Tensor, rw_pe: Tensor, edge_index: Tensor, edge_attr: Tensor,
                batch: Tensor) -> Tensor:
        """Graph-level predictions ``[B, 1]``."""
        h = sum(emb(col) for emb, col in zip(self.atom, x.view(x.size(0), -1).t()))
        h = torch.cat([h, self.pe_lin(self.pe_norm(rw_pe))], dim=-1)
        e = sum(emb(col) for emb, col in zip(self.bond, edge_attr.view(edge_attr.size(0), -1).t()))
        for conv in self.convs:
            h = conv(h, edge_index, batch, edge_attr=e)
        return self.head(global_add_pool(h, batch))


def throughput_rows(settings: Settings) -> list[Row]:
    r"""Training throughput (graphs/s: forward, backward and optimiser step, data loading included,
    over ``train_steps`` steps after 3 warm-up steps) of the ZINC GEAET recipe vs
    :class:`GPSExample`, on the same ZINC training loader (the suite's ZINC build, batch size of the
    recipe), alternating blocks of steps so that drift hits both."""
    from gea_graph.bench.perf_throughput import recipe_trainer, reference_trainer

    ours, loader, note = recipe_trainer(settings.device)
    ref = reference_trainer(loader, settings.device)
    for trainer in (ours, ref):
        trainer.run(3, timed=False)
    block = max(settings.train_steps // 5, 1)
    done = 0
    while done < settings.train_steps:
        n = min(block, settings.train_steps - done)
        ours.run(n)
        ref.run(n)
        done += n
    return [Row("training throughput [ZINC GEAET recipe vs PyG GPS example]",
                ours.graphs_per_second(), ref.graphs_per_second(), "graphs/s",
                Target(">=", 0.8), f"{settings.train_steps} steps; {note}")]

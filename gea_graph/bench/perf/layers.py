r"""Layer rows of the performance suite: forward + backward of our layers against their references on
real mini-batches (ZINC, 128 graphs; Peptides-func, 64 graphs), width :data:`CHANNELS`,
:data:`HEADS` heads, with the peak memory of a step beside each time."""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path
from torch import Tensor
from torch.nn import Linear, Module, ReLU, Sequential
from torch_geometric.nn import GINEConv, GPSConv
from torch_geometric.utils import to_dense_batch

from gea_graph.bench.perf.core import Row, Settings, Target, layer_rows
from gea_graph.bench.perf.data import LayerInput, layer_input

CHANNELS = 64
HEADS = 4
#: Largest shortest-path distance embedded in the Graphormer attention bias.
MAX_DISTANCE = 20


class TwoLinearFloor(Module):
    r"""The FLOP floor of :class:`~gea_graph.nn.ExternalAttention` with node units: the same two
    per-head :class:`~torch.nn.Linear` maps (:math:`d/H \to S \to d/H`) on the same nodes, without
    the double normalisation between them."""

    def __init__(self, channels: int, heads: int, units: int) -> None:
        super().__init__()
        self.heads = heads
        self.key = Linear(channels // heads, units)
        self.value = Linear(units, channels // heads)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C] -> [N, C]``."""
        n, c = x.shape
        return self.value(self.key(x.view(n, self.heads, c // self.heads))).reshape(n, c)


def gps_reference(channels: int = CHANNELS, heads: int = HEADS) -> GPSConv:
    """PyG's ``GPSConv(GINEConv(MLP), heads)`` at the given width (PyG examples/graph_gps.py)."""
    mlp = Sequential(Linear(channels, channels), ReLU(), Linear(channels, channels))
    return GPSConv(channels, GINEConv(mlp), heads=heads)


def _seeded(build: Callable[[], Module], device: torch.device) -> Module:
    torch.manual_seed(0)
    return build().to(device)


def _note(inp: LayerInput, extra: str = "") -> str:
    parts = [f"{inp.num_graphs} graphs, {inp.x.size(0)} nodes"]
    if inp.note:
        parts.append(inp.note)
    if extra:
        parts.append(extra)
    return "; ".join(parts)


def external_attention_rows(settings: Settings) -> list[Row]:
    """``ExternalAttention`` (4 heads, node units) vs its two-``Linear`` FLOP floor."""
    from gea_graph.nn import ExternalAttention

    rows: list[Row] = []
    for ds in settings.layer_datasets:
        inp = layer_input(ds, CHANNELS, settings.device)
        ours = _seeded(lambda: ExternalAttention(CHANNELS, heads=HEADS), settings.device)
        ref = _seeded(partial(TwoLinearFloor, CHANNELS, HEADS, ours.units), settings.device)
        rows += layer_rows(
            f"external attention [{ds}]", ours,
            partial(ours, inp.x, inp.batch, num_graphs=inp.num_graphs),
            ref, partial(ref, inp.x), Target("<=", 1.4), settings, _note(inp))
    return rows


def _geaet_vs_gps(settings: Settings, label: str, target: float | dict[str, float],
                  datasets: tuple[str, ...] | None = None, **layer_kwargs: object) -> list[Row]:
    from gea_graph.nn import GEAETLayer

    rows: list[Row] = []
    for ds in datasets or settings.layer_datasets:
        inp = layer_input(ds, CHANNELS, settings.device)
        ours = _seeded(lambda: GEAETLayer(CHANNELS, heads=HEADS, **layer_kwargs),
                       settings.device)
        ref = _seeded(gps_reference, settings.device)
        rows += layer_rows(
            f"{label} [{ds}]", ours,
            partial(ours, inp.x, inp.edge_index, inp.edge_attr, inp.batch,
                    num_graphs=inp.num_graphs),
            ref, partial(ref, inp.x, inp.edge_index, inp.batch, edge_attr=inp.edge_attr),
            Target("<=", target[ds] if isinstance(target, dict) else target), settings, _note(inp))
    return rows


#: Targets of the GPS-style rows: on Peptides-func (graphs of 8 to ~440 nodes) PyG's ``GPSConv`` attends on the padded
#: batch, ours on the packed rows (issue 22: at most 0.4 of its time).
GPS_TARGETS = {"ZINC": 1.05, "Peptides-func": 0.4}


def gps_layer_rows(settings: Settings) -> list[Row]:
    """``GEAETLayer(mpnn="gine", attn="softmax", gea=False)`` vs ``GPSConv(GINEConv)``, on ZINC and Peptides-func
    (both also in the quick mode)."""
    return _geaet_vs_gps(settings, "GPS-style layer", GPS_TARGETS, datasets=tuple(GPS_TARGETS), mpnn="gine",
                         attn="softmax", gea=False)


def geaet_layer_rows(settings: Settings) -> list[Row]:
    """``GEAETLayer(mpnn="gatedgcn", attn="softmax", gea=True)`` vs ``GPSConv(GINEConv)``."""
    return _geaet_vs_gps(settings, "full GEAET layer", 1.5, mpnn="gatedgcn", attn="softmax",
                         gea=True)


def dense_spd(edge_index: Tensor, batch: Tensor, num_graphs: int, max_nodes: int) -> Tensor:
    r"""Hop distances ``[B, N_max, N_max]`` (long; capped at :data:`MAX_DISTANCE`, unreachable and
    padding ``MAX_DISTANCE + 1``) of a batch, by :func:`scipy.sparse.csgraph.shortest_path`."""
    ei = edge_index.cpu().numpy()
    b = batch.cpu().numpy()
    counts = np.bincount(b, minlength=num_graphs)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.full((num_graphs, max_nodes, max_nodes), MAX_DISTANCE + 1, dtype=np.int64)
    edge_graph = b[ei[0]]
    for g in range(num_graphs):
        n = int(counts[g])
        sel = edge_graph == g
        s, d = ei[0, sel] - starts[g], ei[1, sel] - starts[g]
        adj = coo_matrix((np.ones(len(s)), (s, d)), shape=(n, n)).tocsr()
        dist = shortest_path(adj, method="D", unweighted=True)
        dist[~np.isfinite(dist)] = MAX_DISTANCE + 1
        out[g, :n, :n] = np.minimum(dist, MAX_DISTANCE + 1).astype(np.int64)
    return torch.from_numpy(out)


def graphormer_inputs(inp: LayerInput, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    r"""Dense ``(x [B, N, C], mask [B, N], attn_bias [B, H, N, N])`` of a batch; the bias is a
    fixed per-head embedding of the real shortest-path distances, a leaf that requires grad (as the
    output of Graphormer's spatial encoding does)."""
    x, mask = to_dense_batch(inp.x, inp.batch)
    spd = dense_spd(inp.edge_index, inp.batch, inp.num_graphs, x.size(1))
    table = torch.randn(MAX_DISTANCE + 2, HEADS, generator=torch.Generator().manual_seed(2))
    bias = table[spd].permute(0, 3, 1, 2).contiguous().to(device).requires_grad_(True)
    return x, mask, bias


def _graphormer_pair(settings: Settings, attn: str, target: float) -> list[Row]:
    from gea_graph.nn import GraphormerLayer

    rows: list[Row] = []
    for ds in settings.layer_datasets:
        inp = layer_input(ds, CHANNELS, settings.device)
        x, mask, bias = graphormer_inputs(inp, settings.device)
        ours = _seeded(lambda: GraphormerLayer(CHANNELS, HEADS, attn=attn), settings.device)
        ref = _seeded(lambda: GraphormerLayer(CHANNELS, HEADS, attn="softmax"), settings.device)
        note = _note(inp, f"dense {tuple(x.shape[:2])}")
        rows += layer_rows(f"Graphormer {attn} vs softmax [{ds}]", ours,
                           partial(ours, x, mask, bias), ref, partial(ref, x, mask, bias),
                           Target("<=", target), settings, note)
        bias.grad = None
    return rows


def graphormer_rows(settings: Settings) -> list[Row]:
    """Graphormer layer with GFSA (≤ 1.10) and with p-Laplacian attention (≤ 1.5) vs softmax."""
    return _graphormer_pair(settings, "gfsa", 1.10) + _graphormer_pair(settings, "plaplacian", 1.5)


def _slope(sizes: tuple[int, ...], values: list[float]) -> float:
    # Least-squares slope of log(value) against log(N): 1 = linear growth, 2 = quadratic.
    lx = [math.log(n) for n in sizes]
    ly = [math.log(max(v, 1e-12)) for v in values]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return (sum((a - mx) * (b - my) for a, b in zip(lx, ly))
            / sum((a - mx) ** 2 for a in lx))


def agf_scaling_rows(settings: Settings) -> list[Row]:
    r"""``AGFAttention`` vs ``MultiheadAttention`` on one graph of N nodes (``settings.agf_sizes``;
    256, 1024, 4096 in the suite): time and memory per N (AGF must be faster from the second size,
    1024, on), and the log-log growth slopes of both (AGF's must be linear: slope ≤ 1.2)."""
    from gea_graph.nn.attention import AGFAttention, MultiheadAttention

    rows: list[Row] = []
    times: list[tuple[float, float]] = []
    mems: list[tuple[float, float]] = []
    sizes = settings.agf_sizes
    for n in sizes:
        gen = torch.Generator().manual_seed(n)
        x = torch.randn(1, n, CHANNELS, generator=gen).to(settings.device)
        mask = torch.ones(1, n, dtype=torch.bool, device=settings.device)
        ours = _seeded(lambda: AGFAttention(CHANNELS, HEADS), settings.device)
        ref = _seeded(lambda: MultiheadAttention(CHANNELS, HEADS), settings.device)
        target = Target("<=", 1.0) if n > sizes[0] else None
        t_row, m_row = layer_rows(f"AGF vs softmax attention, N={n}", ours, partial(ours, x, mask),
                                  ref, partial(ref, x, mask), target, settings,
                                  "one random graph" + (", must be faster" if target else ""))
        rows += [t_row, m_row]
        times.append((t_row.ours, t_row.reference))
        mems.append((m_row.ours, m_row.reference))
    for what, vals in (("time", times), ("peak memory", mems)):
        rows.append(Row(f"AGF {what} growth N={sizes[0]}→{sizes[-1]}",
                        _slope(sizes, [a for a, _ in vals]), _slope(sizes, [b for _, b in vals]),
                        "log-log slope",
                        Target("<=", 1.2, on="ours"),
                        "slope 1 = linear, 2 = quadratic; reference = softmax attention"))
    return rows

r"""Fixed-size batches: every mini-batch padded to one of a few shapes chosen once per dataset split.

A CUDA graph (``torch.compile(mode="reduce-overhead")``) replays one fixed set of kernels on buffers of fixed sizes,
but a mini-batch of graphs has new sizes every step (650-800 nodes for 32 ZINC molecules). As Graphcore's
``FixedSizeDataLoader`` and PyG's :class:`~torch_geometric.transforms.Pad`, each batch is padded here to a
:class:`FixedShape` (graphs, nodes, edges and the size of the largest graph) taken from a short list planned once per
split (:func:`plan_shapes`), so a whole run compiles at most one graph per shape.

**Padding graphs** take the extra nodes and edges: :math:`P` graphs of 1 to ``max_nodes`` isolated nodes each, after
the real graphs, and the extra edges as self-loops spread over their nodes. Since every layer of the toolkit works per
graph (message passing, the global attentions, GEA's per-graph softmax, pooling), no real graph sees a padding graph;
what spans the whole batch excludes them through the masks that :func:`pad_batch` adds (``node_mask``,
``edge_mask``, ``graph_mask``, ``True`` on real rows):

* batch normalisation, through :func:`padding` (statistics over the real rows only), and GEA's batch-wide softmax
  (the authors' ``norm_scope: batch``: sums over the real rows only, :func:`gea_graph.nn.norm.real_row_mask`);
* the loss (:func:`masked_loss`: a masked mean, no boolean indexing) and the metrics (``gea_graph.train.metrics``).

A padded batch therefore gives the unpadded batch's outputs, loss and gradients (``tests/train/test_fixed_size.py``
checks each model family to 1e-5 in fp32). AGF's orthogonality loss (``aux_weight``) averages over every graph of
the batch with no mask and is refused (:func:`supported`).

Example::

    shapes = plan_shapes(*graph_sizes(dataset), batch_size=32)
    for batch in loader:
        batch = pad_batch(batch, choose_shape(shapes, batch))
        with padding(batch):
            loss = masked_loss(model(batch, max_num_nodes=shape.max_nodes), batch, "l1", "graph_regression")
"""
from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch

from gea_graph.data.device import HOST_PTR, host_ptr
from gea_graph.nn.norm import padding_rows, update_running_statistics

#: Tasks whose batches can be padded (link ranking draws its candidates from the real graphs' nodes per pair).
TASKS = ("graph_regression", "graph_classification", "graph_multilabel", "node_classification", "target_node")

#: Keys that :func:`pad_batch` adds.
MASK_KEYS = ("node_mask", "edge_mask", "graph_mask")
#: Where :func:`plan_shapes` puts a split's smaller shapes, among its random batches' node and edge totals.
QUANTILES = (0.5, 0.9)
#: The graphs a fixed-size run compiles at most: a shape per quantile and the largest, for training on the training
#: split and for evaluation on the validation, test and (``trainer.eval_train``) training splits.
MAX_COMPILED_GRAPHS = 4 * (len(QUANTILES) + 1)


@dataclass(frozen=True, order=True)
class FixedShape:
    r"""The sizes of a padded batch: ``graphs`` (real and padding), ``nodes``, ``edges`` and ``max_nodes`` (the
    nodes of its largest graph, the width of the padded attention layout)."""

    nodes: int
    edges: int
    graphs: int
    max_nodes: int

    def fits(self, graphs: int, nodes: int, edges: int, largest: int) -> bool:
        r"""Whether a batch of these real sizes pads to this shape: at least one padding graph, each padding graph
        holding 1 to ``max_nodes`` nodes, and the padding edges on padding nodes."""
        pad_graphs, pad_nodes = self.graphs - graphs, self.nodes - nodes
        return (largest <= self.max_nodes and edges <= self.edges and pad_graphs >= 1
                and pad_graphs <= pad_nodes <= pad_graphs * self.max_nodes)


def supported(model_cfg: Any) -> str | None:
    r"""Why a model cannot train on fixed-size batches (``None`` when it can)."""
    if model_cfg.task not in TASKS:
        return f"task {model_cfg.task} (its candidates are drawn per pair from the real graphs)"
    if getattr(model_cfg, "attn", None) == "agf" and getattr(model_cfg, "aux_weight", 0.0):
        return "AGF's orthogonality loss (aux_weight) averages over every graph of the batch, padding graphs included"
    return None


def graph_sizes(dataset: Any, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    r"""``(nodes, edges)`` of every graph of ``dataset`` (two ``[len]`` arrays), read batch by batch from a
    toolkit dataset's store (``dataset.batch``), else graph by graph."""
    nodes: list[np.ndarray] = []
    edges: list[np.ndarray] = []
    if callable(getattr(dataset, "batch", None)):
        for start in range(0, len(dataset), chunk):
            batch = dataset.batch(np.arange(start, min(start + chunk, len(dataset))))
            nodes.append(batch.ptr.diff().numpy())
            edges.append(batch._slice_dict["edge_index"].diff().numpy())
    else:
        nodes.append(np.array([g.num_nodes for g in dataset], dtype=np.int64))
        edges.append(np.array([g.num_edges for g in dataset], dtype=np.int64))
    return np.concatenate(nodes).astype(np.int64), np.concatenate(edges).astype(np.int64)


def plan_shapes(nodes: np.ndarray, edges: np.ndarray, batch_size: int, quantiles: Sequence[float] = QUANTILES,
                samples: int = 512, seed: int = 0) -> list[FixedShape]:
    r"""The shapes of a split's batches of ``batch_size`` graphs (padding graphs added), smallest first.

    The last shape bounds every batch the split can give (the ``batch_size`` largest graphs together, and any
    smaller last batch); the others sit at the :obj:`quantiles` of the node and edge totals of :obj:`samples` random
    batches (a fixed generator), so that most batches need little padding. At most ``len(quantiles) + 1`` shapes: a
    whole run compiles at most that many graphs for the split.

    Args:
        nodes (np.ndarray): Nodes of each graph of the split.
        edges (np.ndarray): Edges of each graph of the split.
        batch_size (int): Graphs per batch.
        quantiles (Sequence[float], optional): Where the smaller shapes sit. (default: :obj:`(0.5, 0.9)`)
        samples (int, optional): Random batches drawn to place them. (default: :obj:`512`)
        seed (int, optional): Seed of those draws. (default: :obj:`0`)
    """
    nodes, edges = np.asarray(nodes, dtype=np.int64), np.asarray(edges, dtype=np.int64)
    if nodes.size == 0:
        raise ValueError("plan_shapes: the split has no graph")
    b = min(batch_size, nodes.size)
    largest = int(nodes.max())
    sorted_nodes = np.sort(nodes)
    least = int(sorted_nodes[:b].sum())  # the fewest nodes a full batch can hold

    def shape(total_nodes: int, total_edges: int) -> FixedShape:
        # P padding graphs of at most `largest` nodes must take N - n nodes for every batch this shape serves
        # (n >= least for a full batch; a smaller last batch leaves more graphs to pad with), and at least one node
        # each: N - n >= P for the batches with the most nodes.
        n = total_nodes
        while True:
            pad = max(1, math.ceil((n - least) / largest))
            if n - total_nodes >= pad:
                break
            n = total_nodes + pad
        g = b + pad
        e = max(total_edges, 0)
        while e in (n, g) or n == g:  # distinct row counts: batch norm tells nodes, edges and graphs apart by them
            e += 1
        return FixedShape(nodes=n, edges=e, graphs=g, max_nodes=largest)

    top = shape(int(sorted_nodes[-b:].sum()), int(np.sort(edges)[-b:].sum()))
    rng = np.random.default_rng(seed)
    draws = np.stack([rng.choice(nodes.size, b, replace=False) for _ in range(samples)])
    n_tot, e_tot = nodes[draws].sum(1), edges[draws].sum(1)
    shapes = {top}
    for q in quantiles:
        candidate = shape(int(np.quantile(n_tot, q)), int(np.quantile(e_tot, q)))
        if candidate.nodes < top.nodes and candidate.edges <= top.edges:
            shapes.add(FixedShape(candidate.nodes, candidate.edges, top.graphs, largest))
    return sorted(shapes)


def _ptr(batch: Batch) -> Tensor:
    ptr = host_ptr(batch)
    if ptr is None:
        raise ValueError("fixed-size batches: the batch's node offsets (ptr) are not on the host; pad a batch before "
                         "it moves to the device, or gather it with a DeviceSplit")
    return ptr


def batch_sizes(batch: Batch) -> tuple[int, int, int, int]:
    r"""``(graphs, nodes, edges, largest graph)`` of a batch on the CPU or gathered on its device by a
    :class:`~gea_graph.data.device.DeviceSplit` (read from its host-side offsets: no read from the device)."""
    counts = _ptr(batch).diff()
    return batch.num_graphs, int(counts.sum()), batch.edge_index.size(1), int(counts.max()) if counts.numel() else 0


def choose_shape(shapes: Sequence[FixedShape], batch: Batch) -> FixedShape:
    r"""The smallest of ``shapes`` that ``batch`` pads to (a clear error when none does)."""
    sizes = batch_sizes(batch)
    for shape in shapes:
        if shape.fits(*sizes):
            return shape
    raise ValueError(f"a batch of {sizes[0]} graphs, {sizes[1]} nodes, {sizes[2]} edges (largest graph {sizes[3]}) "
                     f"fits none of the split's fixed shapes {list(shapes)}; plan them from this split's graphs")


def _kind(batch: Batch, key: str) -> str:
    # The level of a field from its slices: per node, per edge, per graph, or another count (e.g. Graphormer's
    # node pairs), which a padding graph does not have. Keys named edge_* are edges where counts coincide.
    slices, ptr = batch._slice_dict[key], _ptr(batch)
    node, edge = batch._slice_dict.get("x", ptr), batch._slice_dict["edge_index"]
    candidates = []
    if torch.equal(slices, edge):
        candidates.append("edge")
    if torch.equal(slices, ptr) or torch.equal(slices, node):
        candidates.append("node")
    if torch.equal(slices, torch.arange(batch.num_graphs + 1)):
        candidates.append("graph")
    if not candidates:
        return "other"
    if len(candidates) > 1 and key.startswith("edge") and "edge" in candidates:
        return "edge"
    if len(candidates) > 1 and key in ("y", "graph_mask"):
        return "graph" if "graph" in candidates else candidates[0]
    return candidates[0] if "node" not in candidates else "node"


def field_kinds(batch: Batch) -> dict[str, str]:
    r"""``{key: "node" | "edge" | "graph" | "other"}`` for each field of ``batch`` (read once per split from a batch
    of many graphs, where the levels cannot coincide)."""
    return {key: _kind(batch, key) for key in batch._slice_dict if key in batch and key not in ("batch", "ptr")}


def pad_batch(batch: Batch, shape: FixedShape, kinds: dict[str, str] | None = None) -> Batch:
    r"""``batch`` padded to ``shape`` with padding graphs after its graphs, and the masks ``node_mask [N]``,
    ``edge_mask [E]``, ``graph_mask [G]`` (``True`` on real rows). ``batch`` is on the CPU, or on its device as a
    :class:`~gea_graph.data.device.DeviceSplit` gathers it: the padding is then made there, from sizes known on the
    host (no read from the device), and the slice and increment records stay on the host.

    Padding graphs have isolated nodes (``max_nodes`` each, the last one the rest) with every node and edge field
    zero, and the padding edges are self-loops on their nodes in turn. Fields of another level (node pairs) get no
    rows from a padding graph. ``kinds`` gives each field's level (:func:`field_kinds`; read from ``batch`` when not
    given)."""
    kinds = kinds or field_kinds(batch)
    b, n, e, largest = batch_sizes(batch)
    if not shape.fits(b, n, e, largest):
        raise ValueError(f"pad_batch: a batch of {b} graphs, {n} nodes, {e} edges (largest {largest}) does not pad "
                         f"to {shape}")
    pad_graphs, pad_nodes, pad_edges = shape.graphs - b, shape.nodes - n, shape.edges - e
    device = batch.batch.device
    counts = _padding_counts(pad_graphs, pad_nodes, shape.max_nodes, torch.device("cpu"))  # the host records
    counts_d = counts if device.type == "cpu" else _padding_counts(pad_graphs, pad_nodes, shape.max_nodes, device)
    loops = n + torch.arange(pad_edges, dtype=torch.long, device=device) % pad_nodes
    starts = n + torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])  # first node of each padding graph
    starts_d = n + torch.cat([counts_d.new_zeros(1), counts_d.cumsum(0)[:-1]])
    out = copy.copy(batch)  # every padded field is a new tensor: no copy of the batch's own tensors
    out._slice_dict, out._inc_dict = dict(batch._slice_dict), dict(batch._inc_dict)  # written below
    graph_rows = torch.arange(b, shape.graphs, device=device).repeat_interleave(counts_d, output_size=pad_nodes)
    for key, kind in kinds.items():
        value = batch[key]
        if not isinstance(value, Tensor):
            continue
        if key == "edge_index":
            out.edge_index = torch.cat([value, torch.stack([loops, loops])], dim=1)
            continue
        dim = batch.__cat_dim__(key, value)
        extra = {"node": pad_nodes, "edge": pad_edges, "graph": pad_graphs}.get(kind, 0)
        shape_of = list(value.shape)
        shape_of[dim] = extra
        padded = torch.cat([value, value.new_zeros(shape_of)], dim=dim)
        if key == "target_mask":  # one flagged node per graph (TreeNeighbourMatch): a padding graph's first node
            padded[starts_d] = True
        out[key] = padded
        slices = batch._slice_dict[key]
        per_graph = {"node": counts, "edge": _edge_counts(pad_edges, pad_graphs, counts),
                     "graph": torch.ones(pad_graphs, dtype=torch.long)}.get(kind, counts.new_zeros(pad_graphs))
        out._slice_dict[key] = torch.cat([slices, slices[-1] + per_graph.cumsum(0)])
        incs = batch._inc_dict.get(key)
        if isinstance(incs, Tensor) and incs.numel():
            out._inc_dict[key] = torch.cat([incs, incs.new_zeros(pad_graphs)])
    out._slice_dict["edge_index"] = torch.cat([batch._slice_dict["edge_index"], batch._slice_dict["edge_index"][-1:]
                                               + _edge_counts(pad_edges, pad_graphs, counts).cumsum(0)])
    out._inc_dict["edge_index"] = torch.cat([batch._inc_dict["edge_index"], starts])
    out.batch = torch.cat([batch.batch, graph_rows])
    out.ptr = torch.cat([batch.ptr, n + counts_d.cumsum(0)])
    ptr = torch.cat([_ptr(batch), n + counts.cumsum(0)])
    if HOST_PTR in out.__dict__:  # a batch gathered on its device keeps its offsets on the host (not stale ones)
        out.__dict__[HOST_PTR] = ptr
    out._num_graphs = shape.graphs
    if hasattr(batch._store, "_num_nodes"):  # the per-graph node counts Batch.to_data_list reads
        out._store._num_nodes = list(batch._store._num_nodes) + counts.tolist()
    if "num_nodes" in batch:
        out.num_nodes = shape.nodes
    out.node_mask = torch.arange(shape.nodes, device=device) < n
    out.edge_mask = torch.arange(shape.edges, device=device) < e
    out.graph_mask = torch.arange(shape.graphs, device=device) < b
    # slices of the masks too, so that the padded batch still splits into graphs (Batch.to_data_list)
    for key, slices in (("node_mask", ptr), ("edge_mask", out._slice_dict["edge_index"]),
                        ("graph_mask", torch.arange(shape.graphs + 1))):
        out._slice_dict[key] = slices
        out._inc_dict[key] = torch.zeros(shape.graphs, dtype=torch.long)
    return out


def _padding_counts(pad_graphs: int, pad_nodes: int, max_nodes: int, device: torch.device) -> Tensor:
    # The nodes of each padding graph: max_nodes each, then one with the rest, then single nodes (each graph has at
    # least one). Made from host integers on `device` (scalar fills: nothing is copied or read back).
    counts = torch.ones(pad_graphs, dtype=torch.long, device=device)
    spare = pad_nodes - pad_graphs
    full = min(spare // (max_nodes - 1), pad_graphs) if max_nodes > 1 else 0
    counts[:full] = max_nodes
    if full < pad_graphs:
        counts[full] += spare - full * (max_nodes - 1)
    return counts


def _edge_counts(pad_edges: int, pad_graphs: int, counts: Tensor) -> Tensor:
    # The padding edges per padding graph: self-loops on the padding nodes in turn (node k of the padding takes
    # edges k, k + pad_nodes, ...).
    owner = torch.arange(counts.numel()).repeat_interleave(counts)
    loops = torch.arange(pad_edges) % int(counts.sum())
    return torch.bincount(owner[loops], minlength=pad_graphs) if pad_edges else counts.new_zeros(pad_graphs)


def is_padded(batch: Any) -> bool:
    r"""Whether ``batch`` came from :func:`pad_batch`."""
    return isinstance(getattr(batch, "graph_mask", None), Tensor)


@contextmanager
def padding(batch: Any) -> Iterator[None]:
    r"""Within it, batch normalisation excludes the padding rows of ``batch`` (a no-op for a batch that is not
    padded): see :func:`gea_graph.nn.norm.padding_rows`."""
    if not is_padded(batch):
        yield
        return
    with padding_rows(batch.node_mask, batch.edge_mask, batch.graph_mask):
        yield


def predict_and_loss(model: torch.nn.Module, batch: Any, max_num_nodes: int | None, loss: str,
                     task: str) -> tuple[Tensor, Tensor]:
    r"""``(predictions, masked loss)`` of ``model`` on a padded batch: the function a fixed-size run compiles whole
    (``torch.compile(predict_and_loss, fullgraph=True, dynamic=False)``, one graph per shape; with
    ``mode="reduce-overhead"`` a CUDA graph), so that the loss joins the model's forward and backward graphs."""
    from gea_graph.models.networks import GraphModel
    from gea_graph.train.metrics import masked_loss, prepare

    pred = model(batch, max_num_nodes=max_num_nodes) if isinstance(model, GraphModel) else model(batch)
    update_running_statistics()  # in the compiled graph, not after it
    out, target = prepare(pred, batch, task)
    rows = batch.node_mask if task == "node_classification" else batch.graph_mask
    return pred, masked_loss(loss, out, target, rows)


def unpad(pred: Tensor, batch: Any, task: str) -> Tensor:
    r"""The rows of ``pred`` (a model's output for a padded batch) that belong to real graphs (host-side sizes are
    read: for tests and inference, not for a training step)."""
    if not is_padded(batch):
        return pred
    mask = batch.node_mask if task == "node_classification" else batch.graph_mask
    return pred[: int(mask.sum())]

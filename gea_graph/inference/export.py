r"""``gea-graph export``: a trained model as a ``torch.export`` program that runs with torch (and PyG to build its
inputs) alone.

The program takes the batch tensors and the batch's sizes::

    program = torch.export.load("model.pt2").module()
    out = program(inputs, num_graphs, max_num_nodes)

* ``inputs``: a dict of the batch's tensors as PyG batches them (node-level fields concatenated, ``edge_index``
  offset by the nodes before each graph): ``x``, ``edge_index``, ``edge_attr`` (when the model reads edge
  features), ``batch``, the positional encodings of the model's PE spec (``rw_pe``; ``lap_eigvec``,
  ``lap_eigval``, ``lap_mask``), for Graphormer the shortest-path fields its attention bias is made from
  (``spd_index``, ``spd``, ``spd_path``) and for TreeNeighbourMatch ``target_mask``;
* ``num_graphs``: the number of graphs ``B``; ``max_num_nodes``: the node count of the largest graph, or any bound
  of it of at least 2 (the programs assume a dense attention block of 2 or more positions: PyTorch's
  ``scaled_dot_product_attention`` treats a length of 1 apart), which sizes the dense layout of global attention.
  Passing the sizes leaves nothing data-dependent in the program.
* the output is the model's raw output: ``[B, T]`` for graph-level tasks (apply softmax / sigmoid for classes /
  labels as the file's metadata says), ``[N, T]`` per node for node-level ones.

The numbers of nodes, edges, node pairs and graphs are dynamic (one program for every batch); the sizes are traced as
symbolic integers (``torch.fx.experimental._config.backed_size_oblivious``: a batch of one graph, or a graph with no
edge, is not special-cased). The file's metadata (``extra_files["gea_graph.json"]``) records the input signature
(names, dtypes, shapes in terms of ``nodes``, ``edges``, ``pairs``), the outputs and their names, the featuriser
record and the versions. An architecture that cannot be exported is refused in one line naming it and why.
"""
from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from gea_graph.inference.model import TrainedModel
from gea_graph.io import atomic_write
from gea_graph.models import build_model
from gea_graph.train.checkpoint import installed_versions
from gea_graph.transforms import parse_pe

#: Version of the metadata record of an exported file.
EXPORT_FORMAT = 1
#: Name of the metadata record among the file's extra files.
METADATA_FILE = "gea_graph.json"
#: Fields of a batch that are not model inputs.
_NOT_INPUTS = ("y", "smiles", "ptr", "num_nodes", "edge_label", "edge_label_index")


class ExportError(ValueError):
    r"""A model that cannot be exported (the message names the architecture and why, in one line)."""


class BatchInputs(nn.Module):
    r"""The model called on a dict of batch tensors and the batch's sizes (what the exported program takes)."""

    def __init__(self, model: nn.Module, max_nodes_argument: bool) -> None:
        super().__init__()
        self.model = model
        self.max_nodes_argument = max_nodes_argument

    def forward(self, inputs: dict[str, Tensor], num_graphs: int, max_num_nodes: int) -> Tensor:
        batch = SimpleNamespace(**inputs, num_graphs=num_graphs)
        if self.max_nodes_argument:
            return self.model(batch, max_num_nodes=max_num_nodes)
        return self.model(batch)


def architecture(trained: TrainedModel) -> str:
    r"""The model's family and the branches it builds, e.g. ``geaet (gatedgcn + softmax + GEANet)``."""
    m = trained.recipe.model
    parts = {"geaet": [m.mpnn, m.attn, "GEANet" if m.gea else None], "mpnn": [m.mpnn],
             "graphormer": [m.attn], "pyg_gps": ["GINEConv", "GPSConv multihead"], "pyg_gine": ["GINEConv"]}
    names = [p for p in parts.get(m.family, []) if p]
    return f"{m.family} ({' + '.join(names)})" if names else m.family


def traced_model(trained: TrainedModel) -> nn.Module:
    r"""The network :func:`export_model` traces, on CPU: the trained one, or, where the model config lets the global
    attention run several ways (``attn_impl``), the trained weights in the same network built with the padded dense
    attention: every way computes the same function, and a fused kernel registered as a gea-graph custom operator
    would make the file unloadable without gea-graph."""
    cfg = trained.recipe.model
    if ("attn_impl" not in {f.name for f in dataclasses.fields(cfg)} or cfg.attn_impl == "dense"
            or cfg.attn is None or cfg.family.startswith("pyg_")):
        return trained.model.cpu().eval()
    model = build_model(dataclasses.replace(cfg, attn_impl="dense"))
    model.load_state_dict(trained.model.state_dict())
    return model.eval()


def _tree(num_nodes: int, gen: torch.Generator) -> Tensor:
    src = torch.arange(1, num_nodes)
    dst = torch.randint(0, num_nodes, (num_nodes - 1,), generator=gen) % torch.arange(1, num_nodes)
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)


def example_graphs(trained: TrainedModel, sizes: tuple[int, ...] = (5, 7, 9)) -> list[Data]:
    r"""Random graphs (trees) with the fields and dtypes the model's data has: its node and edge features (zeros
    for categorical ones, which every vocabulary holds), the PEs of its PE spec, ``target_mask`` for
    TreeNeighbourMatch."""
    cfg = trained.recipe.model
    gen = torch.Generator().manual_seed(0)
    graphs = []
    for n in sizes:
        edge_index = _tree(n, gen)
        columns = 9 if cfg.node_encoder == "atom" else cfg.node_in
        categorical = cfg.node_encoder in ("atom", "embedding")
        x = torch.zeros(n, columns, dtype=torch.long) if categorical else torch.randn(n, columns, generator=gen)
        data = Data(x=x, edge_index=edge_index, num_nodes=n)
        if cfg.edge_encoder != "none":
            width = 3 if cfg.edge_encoder == "bond" else cfg.edge_in
            e = edge_index.size(1)
            data.edge_attr = (torch.ones(e, width, dtype=torch.long) if cfg.edge_encoder in ("bond", "embedding")
                              else torch.randn(e, width, generator=gen))
        if cfg.task == "target_node":
            data.target_mask = torch.zeros(n, dtype=torch.bool)
            data.target_mask[0] = True
        transform = parse_pe(trained.featurizer.pe)
        graphs.append(transform(data) if transform is not None else data)
    return graphs


def batch_inputs(batch: Batch, names: list[str] | None = None) -> tuple[dict[str, Tensor], int, int]:
    r"""The arguments of an exported program for a PyG batch: its input tensors (those named in :obj:`names`, the
    metadata's input names; default: every model input the batch holds), ``num_graphs`` and ``max_num_nodes`` (the
    largest graph's node count, at least 2: the programs are traced for a bound of 2 or more)."""
    fields = batch.to_dict()
    if names is None:
        names = [key for key, value in fields.items() if key not in _NOT_INPUTS and isinstance(value, Tensor)]
    missing = [name for name in names if name not in fields]
    if missing:
        raise KeyError(f"the batch has no field(s) {missing}, which the exported model takes")
    counts = batch.ptr.diff() if getattr(batch, "ptr", None) is not None else torch.bincount(batch.batch)
    return ({name: fields[name] for name in names}, int(batch.num_graphs),
            max(2, int(counts.max()) if counts.numel() else 0))


def _dims(inputs: dict[str, Tensor], batch: Batch) -> tuple[dict[str, dict[int, Any]], dict[str, list]]:
    r"""The dynamic dimensions of every input (by comparing its sizes with the example batch's node and edge
    counts) and the signature recorded in the metadata."""
    from torch.export import Dim

    nodes, edges = int(batch.num_nodes), int(batch.edge_index.size(1))
    dims = {"nodes": Dim("nodes", min=1), "edges": Dim("edges", min=0), "pairs": Dim("pairs", min=1)}
    spec: dict[str, dict[int, Any]] = {}
    shapes: dict[str, list] = {}
    for key, value in inputs.items():
        cat = batch.__cat_dim__(key, value)
        cat = cat + value.dim() if cat < 0 else cat
        size = value.size(cat)
        name = "nodes" if size == nodes else "edges" if size == edges else "pairs"
        spec[key] = {cat: dims[name]}
        shapes[key] = [name if d == cat else int(value.size(d)) for d in range(value.dim())]
    return spec, shapes


def export_model(trained: TrainedModel) -> tuple[Any, dict[str, Any]]:
    r"""The exported program of a trained model (on CPU) and its metadata record.

    Raises:
        ExportError: one line naming the architecture and why it cannot be exported.
    """
    import inspect

    import torch.fx.experimental._config as fx_config
    from torch.export import Dim

    model = traced_model(trained)
    takes_bound = "max_num_nodes" in inspect.signature(model.forward).parameters
    wrapper = BatchInputs(model, takes_bound).eval()
    batch = Batch.from_data_list(example_graphs(trained))
    inputs, num_graphs, max_nodes = batch_inputs(batch)
    spec, shapes = _dims(inputs, batch)
    name = architecture(trained)
    if not takes_bound:
        raise ExportError(f"cannot export {name}: its forward takes no max_num_nodes, so the size of its dense "
                          f"attention batch is read from the data (PyG's GPSConv calls to_dense_batch without "
                          f"sizes), which torch.export cannot trace for every batch")
    try:
        with torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
            program = torch.export.export(wrapper, (inputs, num_graphs, max_nodes),
                                          dynamic_shapes=(spec, Dim.DYNAMIC, Dim.DYNAMIC), strict=False)
    except Exception as err:  # noqa: BLE001 -- torch.export raises many types; all mean "not exportable"
        reason = " ".join(str(err).split())[:300] or type(err).__name__
        raise ExportError(f"cannot export {name}: torch.export failed ({type(err).__name__}: {reason})") from None
    activation = {"graph_classification": "softmax", "target_node": "softmax",
                  "graph_multilabel": "sigmoid"}.get(trained.task, "none")
    per = "graphs" if trained.task.startswith("graph_") or trained.task == "target_node" else "nodes"
    metadata = {
        "format": EXPORT_FORMAT,
        "call": "torch.export.load(path).module()(inputs, num_graphs, max_num_nodes)",
        "inputs": [{"name": key, "dtype": str(value.dtype).removeprefix("torch."), "shape": shapes[key]}
                   for key, value in inputs.items()],
        "sizes": ["num_graphs", "max_num_nodes"],
        "output": {"shape": [per, len(trained.target_names)], "names": trained.target_names, "task": trained.task,
                   "activation": activation},
        "architecture": name, "recipe": trained.recipe.name, "featurizer": trained.featurizer.to_dict(),
        # GEA with the authors' batch-wide softmax: a graph's output depends on the batch it is fed in
        "batch_dependent": trained.batch_dependent, "eval_batch_size": trained.eval_batch_size,
        "versions": installed_versions(), "trained_with": trained.record.get("versions", {}),
    }
    return program, metadata


@torch.no_grad()
def check_replay(program: Any, trained: TrainedModel, names: list[str]) -> float:
    r"""The largest difference between the program and the eager model on batches of other shapes than the one
    exported on (a one-node graph alone; a one-node graph, an edgeless pair of nodes and larger graphs together).

    Raises:
        ExportError: when a replay fails or differs by more than 1e-5 (relative and absolute).
    """
    module = program.module()
    worst = 0.0
    for sizes in ((1,), (4, 1, 2, 11, 6)):
        graphs = example_graphs(trained, sizes)
        if len(sizes) > 1:  # the 2-node graph without its edge
            graphs[2].edge_index = graphs[2].edge_index[:, :0]
            if "edge_attr" in graphs[2]:
                graphs[2].edge_attr = graphs[2].edge_attr[:0]
        batch = Batch.from_data_list(graphs)
        eager = trained.model.cpu()(batch)
        try:
            replay = module(*batch_inputs(batch, names))
        except Exception as err:  # noqa: BLE001 -- a guard or kernel failure: the export does not hold
            raise ExportError(f"cannot export {architecture(trained)}: the program fails on graphs of sizes "
                              f"{sizes} ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None
        if not torch.allclose(replay, eager, rtol=1e-5, atol=1e-5):
            raise ExportError(f"cannot export {architecture(trained)}: the program differs from the model by "
                              f"{(replay - eager).abs().max().item():.3g} on graphs of sizes {sizes}")
        worst = max(worst, (replay - eager).abs().max().item() if replay.numel() else 0.0)
    return worst


def save_export(program: Any, metadata: dict[str, Any], path: str | os.PathLike) -> str:
    r"""Writes the program and its metadata (``extra_files["gea_graph.json"]``) to :obj:`path`, atomically."""
    with atomic_write(path, "wb") as f:
        torch.export.save(program, f, extra_files={METADATA_FILE: json.dumps(metadata)})
    return str(path)

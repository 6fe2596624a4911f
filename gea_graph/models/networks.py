r"""Whole networks: encoders, a layer stack, pooling and a task head, built from a :class:`ModelConfig`.

Every model takes a PyG :class:`~torch_geometric.data.Batch` (fields named as in ``docs/design.md``) and returns its
predictions without touching the batch:

* ``graph_*`` tasks: ``[B, out_channels]``;
* ``node_classification``: ``[sum N_i, out_channels]``;
* ``target_node`` (TreeNeighbourMatch): ``[B, out_channels]``, read at the node flagged by ``target_mask``;
* ``link_ranking`` (PCQM-Contact): node embeddings ``[sum N_i, out_channels]``, scored by dot product.

:meth:`GraphModel.aux_loss` averages the layers' auxiliary losses (AGF's orthogonality term) over the layers, times
``aux_weight``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.nn import Dropout, LayerNorm, Module, ModuleList
from torch_geometric.nn import global_add_pool, global_mean_pool

from gea_graph.models.config import ModelConfig
from gea_graph.models.encoders import (
    ConstantEdge,
    MLPHead,
    edge_encoder,
    encode_pe,
    node_encoder,
    pe_encoder,
)
from gea_graph.models.layer_args import (
    geaet_layer_kwargs,
    graphormer_layer_kwargs,
    mpnn_block_kwargs,
)
from gea_graph.models.pyg_peers import PyGGINE, PyGGPS
from gea_graph.nn import (
    CentralityEncoding,
    GatedGCNLayer,
    GEAETLayer,
    GraphormerAttnBias,
    GraphormerLayer,
    GraphToken,
    MPNNBlock,
)
from gea_graph.nn.attention import AttentionPlan

_EDGE_MPNNS = ("gatedgcn", "gine")


class GraphModel(Module):
    r"""Base of the model families: the input encoders, the head and the task readout.

    Subclasses build :attr:`layers` (a :class:`~torch.nn.ModuleList`) and implement :meth:`embed`, which returns the
    final node representations ``[sum N_i, d]`` (and may return a graph representation ``[B, d]`` directly).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        pe_dim = cfg.pe.dim if cfg.pe is not None else 0
        self.node_encoder = node_encoder(cfg, cfg.hidden - pe_dim)
        self.pe_encoder = pe_encoder(cfg.pe, **cfg.pe_args) if cfg.pe is not None else None
        self.head = MLPHead(cfg.hidden, cfg.out_channels, cfg.head_layers, cfg.head_dropout, cfg.act)
        self.layers = ModuleList()

    def encode_nodes(self, batch) -> Tensor:
        r"""Node embeddings ``[sum N_i, d]``: the node encoder's output concatenated with the encoded PE."""
        x = self.node_encoder(batch.x)
        if self.pe_encoder is not None:
            x = encode_pe(self.pe_encoder, self.cfg.pe, x, batch)
        return x

    def embed(self, batch, max_num_nodes: int | None = None,
              node_counts: np.ndarray | None = None) -> tuple[Tensor, Tensor | None]:
        r"""Returns ``(node representations, graph representations or None)``."""
        raise NotImplementedError

    def forward(self, batch, max_num_nodes: int | None = None, node_counts: np.ndarray | None = None) -> Tensor:
        r"""The predictions for ``batch``.

        The global attention plans its layout once per batch
        (:class:`~gea_graph.nn.attention.AttentionPlan`) from the batch's ``ptr`` and two host-side sizes, read
        from the batch (a host sync each) when not given: :obj:`max_num_nodes` (the number of nodes of the batch's
        largest graph, or a bound of it) and :obj:`node_counts` (the node count of every graph, e.g.
        ``batch.ptr.diff().numpy()`` while the batch is still on the CPU; only the size-grouped attentions read
        it). The training loop computes both on the host before the batch moves to the device
        (:func:`host_sizes`), so a training step has no host sync in the model. To compile:
        ``torch.compile(model, dynamic=True, fullgraph=True)(batch, max_num_nodes=n)`` (without
        :obj:`node_counts`: the grouped attentions then run on the padded batch)."""
        nodes, graphs = self.embed(batch, max_num_nodes, node_counts)
        task = self.cfg.task
        if task.startswith("graph_"):
            if graphs is None:
                pool = global_mean_pool if self.cfg.pooling == "mean" else global_add_pool
                graphs = pool(nodes, batch.batch, size=batch.num_graphs)
            return self.head(graphs)
        if task == "target_node":  # one target node per graph: a gather of static size (no host sync)
            rows = torch.nonzero_static(batch.target_mask, size=batch.num_graphs).view(-1)
            return self.head(nodes.index_select(0, rows))
        return self.head(nodes)

    def aux_loss(self) -> Tensor:
        r"""``aux_weight`` times the **mean over layers** of the layers' auxiliary losses, as the AGF code adds
        :math:`\gamma \cdot \mathrm{mean}_{layers} L_{ortho}` (each AGF layer already applies its :math:`\gamma`,
        ``ortho_weight``); ``0`` when ``aux_weight`` is 0 or no layer has one (or outside training).

        A layer's own ``aux_loss()`` is used when it has one, else those of its sub-modules (e.g. the attention)."""
        ref = next(self.parameters())
        total = torch.zeros((), dtype=ref.dtype, device=ref.device)
        if self.cfg.aux_weight == 0.0:
            return total
        count = 0
        for layer in self.layers:
            owners = [layer] if hasattr(layer, "aux_loss") else [
                m for m in layer.modules() if hasattr(m, "aux_loss")]
            for owner in owners:
                loss = owner.aux_loss()
                if loss is not None:
                    total = total + loss
                    count += 1
        return self.cfg.aux_weight * total / max(count, 1)


class GEAETModel(GraphModel):
    r"""GEAET (Liang et al., 2024, Fig. 3): embedding layer, then ``layers`` :class:`~gea_graph.nn.GEAETLayer`
    (MPNN + global attention + GEANet in parallel, any branch off), then pooling and the head. ``mpnn`` only gives
    MPNN+GEANet; ``gea: false`` gives the GPS-style MPNN+Transformer; ``family: mpnn`` (see :class:`MPNNModel`)
    keeps only the MPNN branch."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.edge_encoder = edge_encoder(cfg, cfg.hidden)
        needs_edges = cfg.mpnn in _EDGE_MPNNS or (cfg.gea and cfg.edge_units)
        self.constant_edge = ConstantEdge(cfg.hidden) if self.edge_encoder is None and needs_edges else None
        self.layers = ModuleList([self._layer(cfg) for _ in range(cfg.layers)])
        # Only a GatedGCN or GINE branch turns edge features into node features (GEA's edge units feed edges only).
        self.reads_edges = cfg.mpnn in _EDGE_MPNNS
        # Parameters that no prediction depends on are frozen, so that every trainable parameter gets a gradient at
        # every step (DDP then needs no search for unused ones) and nothing changes in training: they are kept (the
        # authors' parameter counts include them) but take no part. The edge encoder when nothing reads edges (e.g.
        # the bond encoder of the GCN Peptides recipes), and the edge norm of a last GatedGCN layer, whose edge
        # output nobody reads.
        if self.edge_encoder is not None and not self.reads_edges:
            self.edge_encoder.requires_grad_(False)
        last = getattr(self.layers[-1], "mpnn", None) if len(self.layers) else None
        if isinstance(last, GatedGCNLayer) and last.bn_edge is not None:
            last.bn_edge.requires_grad_(False)

    @staticmethod
    def _layer(cfg: ModelConfig) -> Module:
        return GEAETLayer(**geaet_layer_kwargs(cfg))

    def embed(self, batch, max_num_nodes: int | None = None,
              node_counts: np.ndarray | None = None) -> tuple[Tensor, Tensor | None]:
        x = self.encode_nodes(batch)
        edge_attr = None
        if self.edge_encoder is not None and self.reads_edges:
            edge_attr = self.edge_encoder(batch.edge_attr)
        elif self.constant_edge is not None:
            edge_attr = self.constant_edge(batch.edge_index.size(1))
        sizes: dict[str, object] = {"num_graphs": batch.num_graphs}
        if isinstance(self.layers[0], GEAETLayer):  # MPNN blocks have no attention branch
            sizes["max_num_nodes"] = max_num_nodes
            if self.layers[0].attention is not None:  # one plan per batch, shared by the layers
                sizes["plan"] = attention_plan(batch, x.size(0), max_num_nodes, node_counts)
        edge_index = batch.edge_index
        if torch.compiler.is_compiling():
            # A copy whose rows the compiled backward saves apart: inductor (torch 2.13, dynamic shapes) fixes the
            # stride of a saved [2, E] input to its first batch's and fails on the next
            # (tests/train/test_compile_training.py)
            edge_index = torch.stack(edge_index.unbind())
        for layer in self.layers:
            x, edge_attr = layer(x, edge_index, edge_attr, batch.batch, **sizes)
        return x, None


class MPNNModel(GEAETModel):
    r"""A plain message-passing baseline (GCN, GIN, GINE or GatedGCN) as LRGB / GraphGPS run it: the encoders and
    head of :class:`GEAETModel` around ``layers`` :class:`~gea_graph.nn.MPNNBlock` (GCN/GIN/GINE:
    ``Norm(x + Dropout(act(MPNN(x))))``; GatedGCN: the layer itself, with its activation, residual and BatchNorm).
    ``ffn`` and ``local_out_act`` (GEAET-layer options) do not apply: the activation is always there."""

    @staticmethod
    def _layer(cfg: ModelConfig) -> Module:
        return MPNNBlock(**mpnn_block_kwargs(cfg))


class GraphormerModel(GraphModel):
    r"""Graphormer (Ying et al., 2021) as in the GFSA paper: node encoder + centrality encoding, input dropout,
    spatial + edge encodings as a dense attention bias, a graph token, ``layers``
    :class:`~gea_graph.nn.GraphormerLayer` (``attn: gfsa`` gives Graphormer+GFSA), readout at the graph token
    (graph tasks) or the nodes. ``pre_norm: true`` is Graphormer v1 (GFSA's ZINC code): pre-LN layers and a final
    LayerNorm; ``pre_norm: false`` is v2 (fairseq, GFSA's PCQM4M/v2 code): a LayerNorm on the embeddings (after
    the graph token), post-LN layers, no final LayerNorm. The batch needs the ``spd*`` fields (data ``pe: spd:N``). With
    ``attn: agf`` (no bias possible) the structural bias is not built."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        g = cfg.graphormer
        self.centrality = CentralityEncoding(cfg.hidden, g.max_degree)
        self.input_dropout = Dropout(cfg.dropout)
        self.attn_bias: Module | None = None
        if cfg.attn != "agf":
            edge_dim = None
            num_edge_types = None
            if g.max_hops > 0 and cfg.edge_encoder in ("bond", "embedding"):
                edge_dim = 3 if cfg.edge_encoder == "bond" else cfg.edge_in
                num_edge_types = 6 if cfg.edge_encoder == "bond" else cfg.edge_vocab
            elif g.max_hops > 0 and cfg.edge_encoder in ("linear", "voc", "coco"):  # continuous columns
                edge_dim = cfg.edge_in
            self.attn_bias = GraphormerAttnBias(cfg.heads, g.max_distance, edge_dim, num_edge_types,
                                                max(g.max_hops, 1))
        self.graph_token = GraphToken(cfg.hidden, cfg.heads)
        if self.attn_bias is None:  # the token's distance bias joins a bias that AGF does not take: frozen
            self.graph_token.distance.requires_grad_(False)
        self.layers = ModuleList([GraphormerLayer(**graphormer_layer_kwargs(cfg)) for _ in range(cfg.layers)])
        # Graphormer v1 (pre-LN) ends with a LayerNorm; v2 (post-LN) normalises the embeddings instead.
        self.embed_norm = LayerNorm(cfg.hidden) if not cfg.graphormer.pre_norm else None
        self.final_norm = LayerNorm(cfg.hidden) if cfg.graphormer.pre_norm else None

    def embed(self, batch, max_num_nodes: int | None = None,
              node_counts: np.ndarray | None = None) -> tuple[Tensor, Tensor | None]:
        x = self.input_dropout(self.centrality(self.encode_nodes(batch), batch.edge_index))
        # Packed rows with the graph token first in each graph; the structural bias (and the token's) is built per
        # block of graphs of similar size, once for all layers (never for the whole padded batch).
        x, token_rows, node_rows, ptr = self.graph_token.prepend(x, batch.batch, batch_ptr(batch))
        plan = AttentionPlan(ptr, x.size(0), None if max_num_nodes is None else max_num_nodes + 1,
                             None if node_counts is None else np.asarray(node_counts) + 1)
        if self.attn_bias is not None:
            bias, token = self.attn_bias, self.graph_token
            plan = plan.with_bias(lambda layout: bias.blocks(layout, batch, shift=1, extra=token.tile))
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        for layer in self.layers:
            x = layer(x, plan)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x[node_rows], x[token_rows]


def batch_ptr(batch) -> Tensor:
    r"""``batch.ptr`` (graph ``i`` owns nodes ``ptr[i]:ptr[i+1]``), computed from the batch vector when the batch
    has none."""
    ptr = getattr(batch, "ptr", None)
    if ptr is not None:
        return ptr
    counts = torch.zeros(batch.num_graphs, dtype=torch.long, device=batch.batch.device).index_add_(
        0, batch.batch, torch.ones_like(batch.batch))
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


def attention_plan(batch, num_nodes: int, max_num_nodes: int | None = None,
                   node_counts: np.ndarray | None = None) -> AttentionPlan:
    r"""The :class:`~gea_graph.nn.attention.AttentionPlan` of a PyG batch (made once per batch, given to every
    layer)."""
    return AttentionPlan(batch_ptr(batch), num_nodes, max_num_nodes, node_counts, batch=batch.batch)


def host_sizes(batch, ptr: Tensor | None = None) -> dict[str, object]:
    r"""``{"max_num_nodes": int, "node_counts": numpy array}`` of a batch whose ``ptr`` (or batch vector) is on the
    CPU, or from its node offsets :obj:`ptr` kept on the host: what :meth:`GraphModel.forward` takes to run without
    host syncs. Compute it before the batch moves to the device (the training loop does, in
    ``on_before_batch_transfer``)."""
    ptr = batch_ptr(batch) if ptr is None else ptr
    if ptr.device.type != "cpu":
        raise ValueError("host_sizes: the batch is already on the device; compute the sizes before moving it")
    counts = (ptr[1:] - ptr[:-1]).numpy()
    return {"max_num_nodes": int(counts.max()) if counts.size else 0, "node_counts": counts}


def build_model(cfg: ModelConfig) -> Module:
    r"""The network of ``cfg`` (``geaet``: :class:`GEAETModel`, ``graphormer``: :class:`GraphormerModel`,
    ``mpnn``: :class:`MPNNModel`, ``pyg_gps`` / ``pyg_gine``: the PyG peers :class:`~gea_graph.models.pyg_peers.PyGGPS`
    / :class:`~gea_graph.models.pyg_peers.PyGGINE`)."""
    if cfg.family == "pyg_gps":
        return PyGGPS(cfg)
    if cfg.family == "pyg_gine":
        return PyGGINE(cfg)
    if cfg.family == "geaet":
        return GEAETModel(cfg)
    if cfg.family == "graphormer":
        return GraphormerModel(cfg)
    return MPNNModel(cfg)


def count_parameters(model: Module) -> int:
    r"""Number of parameters, the frozen ones included (as the authors' codes count them: a model's frozen
    parameters are those no prediction depends on, see :class:`GEAETModel`)."""
    return sum(p.numel() for p in model.parameters())

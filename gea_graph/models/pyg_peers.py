r"""Peers built from PyG's own classes, so that a benchmark can put PyG's models beside ours on the same data.

* :class:`PyGGPS` (``family: pyg_gps``) is the network of PyG's ``examples/graph_gps.py``: a node embedding of width
  :math:`d - d_{pe}` concatenated with ``Linear(BatchNorm1d(RWPE))`` of width :math:`d_{pe}`, an edge embedding of
  width :math:`d`, ``layers`` x :class:`torch_geometric.nn.GPSConv` (local :class:`~torch_geometric.nn.GINEConv`
  with the MLP ``Linear(d, d) -> ReLU -> Linear(d, d)``, global ``torch.nn.MultiheadAttention`` with ``heads`` heads
  and attention dropout), add pooling and the MLP head :math:`d \to d/2 \to d/4 \to` ``out_channels``.
* :class:`PyGGINE` (``family: pyg_gine``) is a plain GINE network of the same size: the same encoders, head and
  ``GINEConv`` MLPs, each layer :math:`\mathbf{x} \leftarrow \mathbf{x} + \mathrm{Dropout}(\mathrm{ReLU}(
  \mathrm{BN}(\mathrm{GINE}(\mathbf{x}, \mathbf{e}))))` with no global attention.

Neither uses a layer of :mod:`gea_graph.nn`; only the input encoders (:func:`~gea_graph.models.encoders.node_encoder`
and :func:`~gea_graph.models.encoders.edge_encoder`, which for ZINC's one-column atom and bond types are single
``torch.nn.Embedding`` tables, exactly as in the example) come from this package, so the peers read every dataset
our recipes read.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor
from torch.nn import BatchNorm1d, Dropout, Linear, Module, ModuleList, ReLU, Sequential
from torch_geometric.nn import GINEConv, GPSConv, global_add_pool, global_mean_pool
from torch_geometric.nn.resolver import activation_resolver, normalization_resolver

from gea_graph.models.config import ModelConfig
from gea_graph.models.encoders import ConstantEdge, edge_encoder, node_encoder


def _gine(channels: int) -> GINEConv:
    # The example's local message passing: GINE with a two-layer MLP (eps fixed at 0, no edge projection).
    return GINEConv(Sequential(Linear(channels, channels), ReLU(), Linear(channels, channels)))


def halving_head(channels: int, out_channels: int, layers: int) -> Sequential:
    r"""The example's prediction MLP: ``layers`` linear maps of widths :math:`d, d/2, d/4, \dots` to
    ``out_channels``, ReLU between them (``layers=3``: :math:`d \to d/2 \to d/4 \to` out)."""
    if layers < 1:
        raise ValueError(f"model.head_layers must be at least 1 (got {layers})")
    mods: list[Module] = []
    width = channels
    for _ in range(layers - 1):
        mods += [Linear(width, width // 2), ReLU()]
        width //= 2
    mods.append(Linear(width, out_channels))
    return Sequential(*mods)


class PyGPeer(Module):
    r"""Encoders, pooling and head shared by the PyG peers; subclasses fill :attr:`convs` and implement
    :meth:`layer_forward`. Takes a PyG ``Batch`` (``x``, ``edge_index``, ``edge_attr``, ``batch`` and ``rw_pe``
    when the config has an RWPE) and returns ``[B, out_channels]`` for graph tasks, ``[B, out_channels]`` at the
    flagged node for ``target_node``, ``[sum N_i, out_channels]`` for node tasks."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        pe_dim = cfg.pe.dim if cfg.pe is not None else 0
        self.node_encoder = node_encoder(cfg, cfg.hidden - pe_dim)
        self.pe_norm = BatchNorm1d(cfg.pe.size) if cfg.pe is not None else None
        self.pe_lin = Linear(cfg.pe.size, pe_dim) if cfg.pe is not None else None
        self.edge_encoder = edge_encoder(cfg, cfg.hidden)
        # GINE needs edge features: graphs without them get one learned edge vector.
        self.constant_edge = ConstantEdge(cfg.hidden) if self.edge_encoder is None else None
        self.convs = ModuleList()
        self.head = halving_head(cfg.hidden, cfg.out_channels, cfg.head_layers)

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def layer_forward(self, conv: Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                      batch: Tensor) -> Tensor:
        r"""One layer: node features ``[sum N_i, d]`` (and the encoded edges ``[E, d]``) to ``[sum N_i, d]``."""
        raise NotImplementedError

    def forward(self, batch) -> Tensor:
        x = self.node_encoder(batch.x)
        if self.pe_lin is not None:
            x = torch.cat([x, self.pe_lin(self.pe_norm(batch.rw_pe))], dim=-1)
        if self.edge_encoder is not None:
            edge_attr = self.edge_encoder(batch.edge_attr)
        else:
            edge_attr = self.constant_edge(batch.edge_index.size(1))
        for conv in self.convs:
            x = self.layer_forward(conv, x, batch.edge_index, edge_attr, batch.batch)
        task = self.cfg.task
        if task.startswith("graph_"):
            pool = global_add_pool if self.cfg.pooling == "add" else global_mean_pool
            return self.head(pool(x, batch.batch, size=batch.num_graphs))
        if task == "target_node":
            return self.head(x[batch.target_mask])
        return self.head(x)

    def aux_loss(self) -> Tensor:
        r"""The peers have no auxiliary loss (a zero scalar, for the training loop's sake)."""
        return next(self.parameters()).new_zeros(())

    def __repr__(self) -> str:
        c = self.cfg
        return (f"{self.__class__.__name__}({c.hidden}, layers={c.layers}, "
                f"pe={None if c.pe is None else f'rw:{c.pe.size}->{c.pe.dim}'}, pooling={c.pooling})")


class PyGGPS(PyGPeer):
    r"""PyG's ``examples/graph_gps.py`` network (Rampášek et al., 2022, Eq. 2 as PyG's
    :class:`~torch_geometric.nn.GPSConv` implements it):

    .. math::
        \mathbf{H} &= \mathrm{BN}\big(\mathbf{X}^{\ell} + \mathrm{GINE}(\mathbf{X}^{\ell}, \mathbf{E})\big)
        + \mathrm{BN}\big(\mathbf{X}^{\ell} + \mathrm{MHA}(\mathbf{X}^{\ell})\big) \\
        \mathbf{X}^{\ell+1} &= \mathrm{BN}\big(\mathbf{H} + \mathrm{MLP}(\mathbf{H})\big)

    (both branches with dropout ``dropout`` before their residual; the MLP is :math:`d \to 2d \to d`). ``heads`` heads,
    attention dropout ``attn_dropout`` (the example's 0.5). The example's settings: ``hidden=64, layers=10,
    heads=4, attn_dropout=0.5``, RWPE-20 to 8 channels, ZINC's 28 atom types and 4 bond types; 423,857
    parameters.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        for _ in range(cfg.layers):
            self.convs.append(GPSConv(cfg.hidden, _gine(cfg.hidden), heads=cfg.heads, dropout=cfg.dropout,
                                      act=cfg.act, norm=cfg.norm, attn_type="multihead",
                                      attn_kwargs={"dropout": cfg.attn_dropout}))

    def layer_forward(self, conv: Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                      batch: Tensor) -> Tensor:
        return conv(x, edge_index, batch, edge_attr=edge_attr)


class PyGGINEBlock(Module):
    r"""One layer of :class:`PyGGINE`: :math:`\mathbf{x} + \mathrm{Dropout}(\mathrm{act}(\mathrm{Norm}(
    \mathrm{GINE}(\mathbf{x}, \mathbf{e}))))`."""

    def __init__(self, channels: int, norm: str, act: str, dropout: float) -> None:
        super().__init__()
        self.conv = _gine(channels)
        self.norm = normalization_resolver(norm, channels)
        self.act = activation_resolver(act)
        self.dropout = Dropout(dropout)
        # PyG's graph-mode norms (LayerNorm, GraphNorm, ...) take the batch vector; BatchNorm does not.
        self._norm_takes_batch = self.norm is not None and "batch" in inspect.signature(self.norm.forward).parameters

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.conv.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor) -> Tensor:
        h = self.conv(x, edge_index, edge_attr)
        if self.norm is not None:
            h = self.norm(h, batch) if self._norm_takes_batch else self.norm(h)
        return x + self.dropout(self.act(h))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.conv.nn[0].in_features}, norm={self.norm}, act={self.act})"


class PyGGINE(PyGPeer):
    r"""A plain GINE network the size of :class:`PyGGPS`: the same encoders, GINE MLPs, pooling and head, without
    the global attention branch and the FFN block (each layer a :class:`PyGGINEBlock`)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        for _ in range(cfg.layers):
            self.convs.append(PyGGINEBlock(cfg.hidden, cfg.norm, cfg.act, cfg.dropout))

    def layer_forward(self, conv: Module, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                      batch: Tensor) -> Tensor:
        return conv(x, edge_index, edge_attr, batch)

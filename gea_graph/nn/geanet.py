r"""GEANet: graph external attention with a skip connection (the GEAET paper's block)."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module
from torch_geometric.nn.resolver import normalization_resolver

from gea_graph.nn.external_attention import ExternalAttention
from gea_graph.nn.norm import spans_processes


class NodeNorm(Module):
    r"""Wraps a normalisation so that every one is called as ``norm(x, batch, num_graphs)``.

    Built by :func:`resolve_norm`; :attr:`module` is the wrapped layer.
    """

    def __init__(self, module: Module, takes_batch: bool, single_node_safe: bool) -> None:
        super().__init__()
        self.module = module
        self.takes_batch = takes_batch
        self.single_node_safe = single_node_safe

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        if hasattr(self.module, "reset_parameters"):
            self.module.reset_parameters()

    def forward(self, x: Tensor, batch: Tensor | None = None,
                num_graphs: int | None = None) -> Tensor:
        r"""Runs the forward pass of the module."""
        if self.takes_batch:
            return self.module(x, batch, batch_size=num_graphs)
        if (self.single_node_safe and self.training and x.size(0) <= 1
                and not spans_processes(self.module)):  # DDP: every process must gather
            # BatchNorm cannot estimate batch statistics from one row: use the running ones.
            m = self.module
            return torch.nn.functional.batch_norm(x, m.running_mean, m.running_var, m.weight,
                                                  m.bias, False, 0.0, m.eps)
        return self.module(x)

    def __repr__(self) -> str:
        return repr(self.module)


def resolve_norm(norm: str | None, channels: int,
                 norm_kwargs: dict[str, Any] | None = None) -> NodeNorm | None:
    r"""Builds the normalisation used by :class:`GEANet` and
    :class:`~gea_graph.nn.GEAETLayer`.

    * :obj:`"batch_norm"`: :class:`torch.nn.BatchNorm1d` over the nodes of the mini-batch (in
      training, a batch of a single node uses the running statistics instead of failing).
    * :obj:`"layer_norm"`: **per-node** :class:`torch.nn.LayerNorm`. Note that PyG's resolver maps
      ``"layer_norm"`` to :class:`torch_geometric.nn.norm.LayerNorm` whose default is
      ``mode="graph"`` (one mean/variance per *graph*, mixing the nodes of a graph); GraphGPS and the
      GEAET code (COCO-SP) inherit that. Ask for :obj:`"graph_layer_norm"` to get it.
    * :obj:`None` or ``"none"``: no normalisation (returns :obj:`None`).
    * any other name: :func:`torch_geometric.nn.resolver.normalization_resolver` (e.g.
      :obj:`"graph_norm"`, :obj:`"instance_norm"`); ``batch`` is passed when its forward takes it.
    """
    if norm is None or (isinstance(norm, str) and norm.lower() == "none"):
        return None
    kwargs = dict(norm_kwargs or {})
    key = norm.lower().replace("-", "_") if isinstance(norm, str) else norm
    if key in ("batch_norm", "batchnorm", "bn"):
        return NodeNorm(torch.nn.BatchNorm1d(channels, **kwargs), False, True)
    if key in ("layer_norm", "layernorm", "ln"):
        return NodeNorm(torch.nn.LayerNorm(channels, **kwargs), False, False)
    if key == "graph_layer_norm":
        from torch_geometric.nn.norm import LayerNorm
        kwargs.setdefault("mode", "graph")
        return NodeNorm(LayerNorm(channels, **kwargs), True, False)
    module = normalization_resolver(norm, channels, **kwargs)
    params = inspect.signature(module.forward).parameters
    takes_batch = "batch" in params
    if takes_batch and "batch_size" not in params:
        return NodeNorm(_BatchOnly(module), True, False)
    return NodeNorm(module, takes_batch, False)


class _BatchOnly(Module):
    def __init__(self, module: Module) -> None:
        super().__init__()
        self.module = module

    def reset_parameters(self) -> None:
        self.module.reset_parameters()

    def forward(self, x: Tensor, batch: Tensor | None = None,
                batch_size: int | None = None) -> Tensor:
        return self.module(x, batch)

    def __repr__(self) -> str:
        return repr(self.module)


class GEANet(Module):
    r"""The GEANet block from the `"Graph External Attention Enhanced Transformer"
    <https://arxiv.org/abs/2405.21061>`_ paper: multi-head graph external attention
    (:class:`~gea_graph.nn.ExternalAttention`, Eqs. 2–5) with a skip connection, as the external
    branch of the authors' GEAET layer (geaet-notes §1.8):

    .. math::
        \mathbf{X}', \mathbf{E}' &= \mathrm{GEA}(\mathbf{X}, \mathbf{E})

        \mathbf{X}_G &= \mathrm{Norm}\big(\mathbf{X} + \mathrm{Dropout}(\mathbf{X}')\big),
        \qquad \mathbf{E}_G = \mathbf{E}'

    The edge output has no skip connection and no norm (as in the authors' code; Eq. 10 sets
    :math:`\mathbf{E}^{l+1} = \mathbf{E}_G^{l+1}`); with :obj:`edge_units=False` the edge features
    pass through unchanged. In GEAET the edge input is the MPNN's updated edge features (Eq. 8).
    What GEA mixes across nodes and graphs is stated in :class:`~gea_graph.nn.ExternalAttention`:
    with :obj:`norm_scope="graph"` nothing crosses graphs (in evaluation mode, or with a norm that
    does not use batch statistics).

    Args:
        channels (int): Size of node (and edge) features :math:`d`.
        heads (int, optional): Number of external heads :math:`H`. (default: :obj:`4`)
        units (int, optional): Number of external units :math:`S` (:obj:`None`: :math:`d/H`).
            (default: :obj:`None`)
        edge_units (bool, optional): Edge external units. (default: :obj:`False`)
        shared_unit (bool, optional): Shared unit :math:`\mathbf{U}_s`. (default: :obj:`False`)
        norm_scope (str, optional): :obj:`"graph"` or :obj:`"batch"`. (default: :obj:`"graph"`)
        dropout (float, optional): Dropout on the GEA node output before the skip connection
            (the authors' ``external_dropout``). (default: :obj:`0.0`)
        norm (str, optional): :obj:`"batch_norm"`, :obj:`"layer_norm"` (per node),
            :obj:`"graph_layer_norm"`, another PyG norm name, or :obj:`None`; see
            :func:`resolve_norm`. (default: :obj:`"batch_norm"`)
        norm_kwargs (Dict[str, Any], optional): Arguments of the norm. (default: :obj:`None`)
        residual (bool, optional): The skip connection. (default: :obj:`True`)
        **kwargs (optional): Further arguments of :class:`~gea_graph.nn.ExternalAttention`
            (:obj:`out_proj`, :obj:`bias`, :obj:`eps`, :obj:`edge_head_split`,
            :obj:`store_attention`).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, d)` or :obj:`None`,
          batch vector :math:`(|\mathcal{V}|)` or :obj:`None`
        - **output:** node features :math:`(|\mathcal{V}|, d)`, edge features
          :math:`(|\mathcal{E}|, d)` (or :obj:`None`)
    """

    def __init__(
        self,
        channels: int,
        heads: int = 4,
        units: int | None = None,
        edge_units: bool = False,
        shared_unit: bool = False,
        norm_scope: str = "graph",
        dropout: float = 0.0,
        norm: str | None = "batch_norm",
        norm_kwargs: dict[str, Any] | None = None,
        residual: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.channels = channels
        self.dropout = float(dropout)
        self.residual = residual
        self.norm_name = norm
        self.attention = ExternalAttention(channels, heads, units, edge_units=edge_units,
                                           shared_unit=shared_unit, norm_scope=norm_scope,
                                           **kwargs)
        self.norm = resolve_norm(norm, channels, norm_kwargs)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.attention.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()

    @property
    def store_attention(self) -> bool:
        r"""Switch of :attr:`ExternalAttention.store_attention`."""
        return self.attention.store_attention

    @store_attention.setter
    def store_attention(self, value: bool) -> None:
        self.attention.store_attention = value

    @property
    def last_attention(self) -> Tensor | None:
        r"""The node attention map :math:`[N, H, S]` of the last forward (with
        :attr:`store_attention`)."""
        return self.attention.attention

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor | None = None,
        edge_attr: Tensor | None = None,
        batch: Tensor | None = None,
        num_graphs: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        r"""Runs the forward pass of the module. :obj:`edge_index` is only read to find the graph
        of each edge (edge units with :obj:`norm_scope="graph"`)."""
        edge_batch = None
        att = self.attention
        if (att.edge_units and edge_attr is not None and batch is not None
                and att.norm_scope == "graph"):
            if edge_index is None:
                raise ValueError("GEANet with edge units needs 'edge_index' to batch the edges")
            edge_batch = batch.index_select(0, edge_index[0])
        h, edge_out = att(x, batch, edge_attr, edge_batch, num_graphs=num_graphs)
        if self.residual:
            h = x + F.dropout(h, self.dropout, self.training)
        else:
            h = F.dropout(h, self.dropout, self.training)
        if self.norm is not None:
            h = self.norm(h, batch, num_graphs)
        return h, edge_out

    def __repr__(self) -> str:
        a = self.attention
        return (f"{self.__class__.__name__}({self.channels}, heads={a.heads}, units={a.units}, "
                f"edge_units={a.edge_units}, shared_unit={a.shared_unit}, "
                f"norm_scope={a.norm_scope!r}, norm={self.norm_name!r})")

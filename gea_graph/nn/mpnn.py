r"""Local message-passing branches for GEAET-style layers, all called as
``(x, edge_index, edge_attr) -> (x, edge_attr)``."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module, Sequential
from torch_geometric.nn import GCNConv, GINConv, GINEConv
from torch_geometric.nn.inits import reset
from torch_geometric.nn.resolver import activation_resolver, normalize_string
from torch_geometric.typing import OptTensor

from gea_graph.nn.geanet import resolve_norm
from gea_graph.nn.norm import spans_processes

MPNNS = ("gatedgcn", "gcn", "gin", "gine")


class GatedGCNLayer(Module):
    r"""The residual gated graph ConvNet layer with edge-feature updates from the `"Residual Gated
    Graph ConvNets" <https://arxiv.org/abs/1711.07553>`_ paper, in the form used by GraphGPS and
    the GEAET code (`"Benchmarking Graph Neural Networks" <https://arxiv.org/abs/2003.00982>`_;
    geaet-notes §1.8). For an edge :math:`j \to i`:

    .. math::
        \hat{\mathbf{e}}_{ij} &= \mathbf{D}\mathbf{x}_i + \mathbf{E}\mathbf{x}_j
        + \mathbf{C}\mathbf{e}_{ij}, \qquad
        \boldsymbol{\sigma}_{ij} = \mathrm{sigmoid}(\hat{\mathbf{e}}_{ij})

        \mathbf{x}_i' &= \mathbf{A}\mathbf{x}_i + \frac{\sum_{j \to i} \boldsymbol{\sigma}_{ij}
        \odot \mathbf{B}\mathbf{x}_j}{\sum_{j \to i} \boldsymbol{\sigma}_{ij} + \epsilon}

        \mathbf{x}_i^{\mathrm{out}} &= \mathbf{x}_i + \mathrm{Dropout}(\mathrm{act}(
        \mathrm{BN}(\mathbf{x}_i'))), \qquad
        \mathbf{e}_{ij}^{\mathrm{out}} = \mathbf{e}_{ij} + \mathrm{Dropout}(\mathrm{act}(
        \mathrm{BN}(\hat{\mathbf{e}}_{ij})))

    :math:`\mathbf{A}, \dots, \mathbf{E}` are :math:`d \times d` linear maps with bias
    (:math:`\mathbf{A}, \mathbf{D}, \mathbf{B}, \mathbf{E}` are stored as one fused
    :class:`~torch.nn.Linear` :math:`d \to 4d`, :math:`\mathbf{C}` as its own; the parameter count
    is the same, :math:`5(d^2 + d)` plus :math:`4d` for the two norms). The authors' MNIST/CIFAR10
    runs also gated the messages with an EquivStable-LapPE factor :math:`r_{ij}`; that gate is not
    part of this layer (its MLP :math:`1 \to d \to 1` has :math:`3d + 1` parameters, 121 at
    :math:`d = 40`). Because the residual, norm, activation and dropout are inside,
    :attr:`includes_residual` is :obj:`True` and :class:`~gea_graph.nn.GEAETLayer` adds no second
    residual (as the authors' code).

    Args:
        channels (int): Size of node and edge features :math:`d`.
        dropout (float, optional): Dropout on both outputs. (default: :obj:`0.0`)
        act (str or Callable, optional): Activation. (default: :obj:`"relu"`)
        batch_norm (bool, optional): BatchNorm on nodes and edges. (default: :obj:`True`)
        residual (bool, optional): Residual connections. (default: :obj:`True`)
        eps (float, optional): :math:`\epsilon` of the gate normalisation. (default: :obj:`1e-6`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, d)`
        - **output:** node features :math:`(|\mathcal{V}|, d)`, edge features
          :math:`(|\mathcal{E}|, d)`
    """

    def __init__(self, channels: int, dropout: float = 0.0, act: str | Any = "relu",
                 batch_norm: bool = True, residual: bool = True, eps: float = 1e-6,
                 act_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.channels = channels
        self.dropout = float(dropout)
        self.residual = residual
        self.includes_residual = residual
        self.eps = eps
        self.node_lin = Linear(channels, 4 * channels)  # [A | D | B | E]
        self.edge_lin = Linear(channels, channels)  # C
        self.act = activation_resolver(act, **(act_kwargs or {}))
        self.bn_node = torch.nn.BatchNorm1d(channels) if batch_norm else None
        self.bn_edge = torch.nn.BatchNorm1d(channels) if batch_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.node_lin.reset_parameters()
        self.edge_lin.reset_parameters()
        for bn in (self.bn_node, self.bn_edge):
            if bn is not None:
                bn.reset_parameters()

    def _norm(self, bn: Module | None, h: Tensor) -> Tensor:
        if bn is None:
            return h
        # one row: use the running statistics (not when the norm spans a DDP run's processes: all of them
        # must take part in gathering its statistics)
        if self.training and h.size(0) <= 1 and not spans_processes(bn):
            return F.batch_norm(h, bn.running_mean, bn.running_var, bn.weight, bn.bias, False,
                                0.0, bn.eps)
        return bn(h)

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: OptTensor = None) -> tuple[Tensor, Tensor]:
        r"""Runs the forward pass of the module."""
        if edge_attr is None:
            raise ValueError("GatedGCNLayer needs edge features 'edge_attr' of width 'channels'")
        d = self.channels
        src, dst = edge_index[0], edge_index[1]
        # split (not slicing): its backward is one concatenation instead of zero-filled copies
        ax, dx, bex = self.node_lin(x).split([d, d, 2 * d], dim=-1)
        bx_j, ex_j = bex.index_select(0, src).split([d, d], dim=-1)
        e_hat = self.edge_lin(edge_attr).add_(dx.index_select(0, dst)).add_(ex_j)
        sigma = torch.sigmoid(e_hat)
        num = sigma.new_zeros(x.size(0), d).index_add_(0, dst, sigma * bx_j)
        den = sigma.new_zeros(x.size(0), d).index_add_(0, dst, sigma)
        x_new = ax + num / (den + self.eps)

        x_new = self.act(self._norm(self.bn_node, x_new))
        e_new = self.act(self._norm(self.bn_edge, e_hat))
        if self.residual:
            x_new = x + F.dropout(x_new, self.dropout, self.training)
            e_new = edge_attr + F.dropout(e_new, self.dropout, self.training)
        else:
            x_new = F.dropout(x_new, self.dropout, self.training)
            e_new = F.dropout(e_new, self.dropout, self.training)
        return x_new, e_new

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, dropout={self.dropout}, "
                f"residual={self.residual})")


def _mlp(channels: int, act: str | Any = "relu", act_kwargs: dict[str, Any] | None = None) -> Sequential:
    # GraphGPS / GEAET GPSLayer: Linear(d, d) -> the layer's activation -> Linear(d, d)
    return Sequential(Linear(channels, channels), activation_resolver(act, **(act_kwargs or {})),
                      Linear(channels, channels))


class _ConvAdapter(Module):
    includes_residual = False

    def __init__(self, channels: int, conv: Module) -> None:
        super().__init__()
        self.channels = channels
        self.conv = conv

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        reset(self.conv)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.conv})"


def gcn_norm_dense_loops(edge_index: Tensor, num_nodes: int,
                         dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    r"""GCN's symmetric normalisation :math:`\hat{w}_{ij} = 1 / \sqrt{\hat{d}_i \hat{d}_j}` of
    an unweighted graph with exactly one self loop of weight 1 per node: the values of
    :func:`torch_geometric.nn.conv.gcn_conv.gcn_norm` (``add_remaining_self_loops``; without edge
    weights its loops weigh 1, also with ``improved=True``), without its data-dependent masking:
    the graph's own self loops stay in place with weight 0 and a loop is appended for every
    node. No host sync and output shapes that depend only on the input shapes, so it compiles
    without graph breaks.

    Returns ``(edge_index [2, E + N], edge_weight [E + N])``."""
    dtype = dtype or torch.get_default_dtype()
    loop = torch.arange(num_nodes, device=edge_index.device)
    # Rows stacked, not one cat along dim 1: inductor (torch 2.13, dynamic shapes) fixes the stride of such a cat,
    # saved for backward, to its first batch's and fails on the next (tests/train/test_compile_training.py).
    index = torch.stack([torch.cat([edge_index[0], loop]), torch.cat([edge_index[1], loop])])
    weight = torch.cat([(edge_index[0] != edge_index[1]).to(dtype),
                        torch.ones(num_nodes, dtype=dtype, device=edge_index.device)])
    deg = weight.new_zeros(num_nodes).index_add_(0, index[1], weight)  # >= 1: every node has a loop
    inv_sqrt = deg.rsqrt()
    return index, inv_sqrt[index[0]] * weight * inv_sqrt[index[1]]


class GCNLayer(_ConvAdapter):
    r"""Adapter of :class:`torch_geometric.nn.conv.GCNConv` (:math:`d \to d`) to the
    ``(x, edge_index, edge_attr) -> (x, edge_attr)`` interface; edge features are not read and
    are returned unchanged (as the GEAET Peptides-Struct runs: bond features are never used).

    With the default normalisation the edge weights come from :func:`gcn_norm_dense_loops` (the
    same values as :class:`~torch_geometric.nn.conv.GCNConv`'s own ``gcn_norm``, but without its
    data-dependent self-loop filtering, so the layer compiles without graph breaks); the
    convolution then runs with ``normalize=False``. ``normalize=False``, ``cached=True`` or ``add_self_loops=False``
    leave everything to :class:`~torch_geometric.nn.conv.GCNConv`.

    Args:
        channels (int): Feature size :math:`d`.
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.GCNConv`.
    """

    def __init__(self, channels: int, **kwargs: Any) -> None:
        self_norm = (kwargs.get("normalize", True) and not kwargs.get("cached", False)
                     and kwargs.get("add_self_loops", True) is not False)
        if self_norm:
            kwargs.update(normalize=False, add_self_loops=False)
        super().__init__(channels, GCNConv(channels, channels, **kwargs))
        self.self_norm = self_norm

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: OptTensor = None) -> tuple[Tensor, OptTensor]:
        r"""Runs the forward pass of the module."""
        if not self.self_norm:
            return self.conv(x, edge_index), edge_attr
        index, weight = gcn_norm_dense_loops(edge_index, x.size(0), x.dtype)
        return self.conv(x, index, weight), edge_attr


class GINLayer(_ConvAdapter):
    r"""Adapter of :class:`torch_geometric.nn.conv.GINConv` with the GraphGPS MLP
    (``Linear(d, d) -> act -> Linear(d, d)``, or :obj:`nn`); edge features pass through.

    Args:
        channels (int): Feature size :math:`d`.
        nn (torch.nn.Module, optional): The MLP. (default: :obj:`None`)
        act (str or Callable, optional): Activation inside the MLP (the layer's activation in the
            authors' code). (default: :obj:`"relu"`)
        act_kwargs (Dict[str, Any], optional): Arguments of the activation. (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.GINConv`.
    """

    def __init__(self, channels: int, nn: Module | None = None, act: str | Any = "relu",
                 act_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        mlp = nn if nn is not None else _mlp(channels, act, act_kwargs)
        super().__init__(channels, GINConv(mlp, **kwargs))

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: OptTensor = None) -> tuple[Tensor, OptTensor]:
        r"""Runs the forward pass of the module."""
        return self.conv(x, edge_index), edge_attr


class GINELayer(_ConvAdapter):
    r"""Adapter of :class:`torch_geometric.nn.conv.GINEConv` with the GraphGPS MLP
    (``Linear(d, d) -> act -> Linear(d, d)``, or :obj:`nn`); edge features are read and returned
    unchanged.

    Args:
        channels (int): Feature size :math:`d`.
        nn (torch.nn.Module, optional): The MLP. (default: :obj:`None`)
        edge_dim (int, optional): Edge feature size if it differs from :math:`d`.
            (default: :obj:`None`)
        act (str or Callable, optional): Activation inside the MLP (the layer's activation in the
            authors' code). (default: :obj:`"relu"`)
        act_kwargs (Dict[str, Any], optional): Arguments of the activation. (default: :obj:`None`)
        **kwargs (optional): Arguments of :class:`~torch_geometric.nn.conv.GINEConv`.
    """

    def __init__(self, channels: int, nn: Module | None = None, edge_dim: int | None = None,
                 act: str | Any = "relu", act_kwargs: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        mlp = nn if nn is not None else _mlp(channels, act, act_kwargs)
        super().__init__(channels, GINEConv(mlp, edge_dim=edge_dim, **kwargs))

    def forward(self, x: Tensor, edge_index: Tensor,
                edge_attr: OptTensor = None) -> tuple[Tensor, OptTensor]:
        r"""Runs the forward pass of the module."""
        if edge_attr is None:
            raise ValueError("GINELayer needs edge features 'edge_attr'")
        return self.conv(x, edge_index, edge_attr), edge_attr


_CLASSES = (GatedGCNLayer, GCNLayer, GINLayer, GINELayer)
_ALIASES = {"customgatedgcn": GatedGCNLayer, "gatedgcnlayer": GatedGCNLayer}


def mpnn_class(name: str) -> type[Module]:
    r"""The MPNN class named :obj:`name` (:obj:`"gatedgcn"`, :obj:`"gcn"`, :obj:`"gin"`,
    :obj:`"gine"`; case, ``-`` and ``_`` ignored; the class names work too)."""
    key = normalize_string(name)
    if key in _ALIASES:
        return _ALIASES[key]
    for cls in _CLASSES:
        cls_key = normalize_string(cls.__name__)
        if key in (cls_key, cls_key.replace("layer", "")):
            return cls
    raise ValueError(f"Unknown MPNN {name!r} (choose from {', '.join(MPNNS)})")


def mpnn_resolver(name: str | Module | None, channels: int, act: str | Any | None = None,
                  **kwargs: Any) -> Module | None:
    r"""Builds a local MPNN branch by name: :obj:`"gatedgcn"` (:class:`GatedGCNLayer`),
    :obj:`"gcn"`, :obj:`"gin"`, :obj:`"gine"` (the adapters), or :obj:`None` (no branch). A module
    is returned as is. ``kwargs`` go to the class; :obj:`act` (the surrounding layer's activation)
    goes to the classes that have one inside (GatedGCN's node and edge updates, the GIN/GINE MLPs),
    as the authors' code does, and is not used by GCN."""
    if name is None or (isinstance(name, str) and name.lower() == "none"):
        return None
    if isinstance(name, Module):
        return name
    cls = mpnn_class(name)
    if act is not None and "act" in inspect.signature(cls.__init__).parameters:
        kwargs = {"act": act, **kwargs}
    return cls(channels, **kwargs)


class MPNNBlock(Module):
    r"""One layer of a plain message-passing baseline, as the LRGB / GraphGPS baselines
    (``GCNConvLayer``, ``GINEConvLayer``; Dwivedi et al., 2022; Rampášek et al., 2022):

    .. math::
        \mathbf{X}' = \mathrm{Norm}\big(\mathbf{X} + \mathrm{Dropout}(\mathrm{act}(
        \mathrm{MPNN}(\mathbf{X}, \mathbf{E})))\big)

    for GCN, GIN and GINE (edge features pass through). :class:`GatedGCNLayer` already holds its
    activation, dropout, residual and BatchNorm (:obj:`norm` ``"batch_norm"`` or :obj:`None`
    switches that BatchNorm), so the block is that layer alone. With the activation, a stack of
    blocks is not an affine map even without an FFN (the GCN baselines of the tree recipes).

    Args:
        channels (int): Feature size :math:`d`.
        mpnn (str): :obj:`"gatedgcn"`, :obj:`"gcn"`, :obj:`"gin"` or :obj:`"gine"`.
        act (str, optional): Activation (also inside GatedGCN and the GIN/GINE MLPs).
            (default: :obj:`"relu"`)
        dropout (float, optional): Dropout after the activation. (default: :obj:`0.0`)
        norm (str, optional): Normalisation (see :func:`~gea_graph.nn.geanet.resolve_norm`).
            (default: :obj:`"batch_norm"`)
        mpnn_kwargs (Dict[str, Any], optional): Further arguments of the MPNN class.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, edge indices
          :math:`(2, |\mathcal{E}|)`, edge features :math:`(|\mathcal{E}|, d)` or :obj:`None`,
          batch vector :math:`(|\mathcal{V}|)` or :obj:`None`
        - **output:** node features :math:`(|\mathcal{V}|, d)`, edge features (or :obj:`None`)
    """

    def __init__(self, channels: int, mpnn: str, act: str = "relu", dropout: float = 0.0,
                 norm: str | None = "batch_norm", mpnn_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.channels, self.act_name, self.dropout = channels, act, float(dropout)
        kwargs = dict(mpnn_kwargs or {})
        if mpnn_class(mpnn) is GatedGCNLayer:
            if norm not in (None, "none", "batch_norm"):
                raise ValueError(f"GatedGCN normalises with its own BatchNorm: norm must be 'batch_norm' or None, "
                                 f"got {norm!r}")
            kwargs = {"dropout": self.dropout, "batch_norm": norm == "batch_norm", **kwargs}
            self.mpnn = mpnn_resolver(mpnn, channels, act=act, **kwargs)
            self.act = None
            self.norm = None
        else:
            self.mpnn = mpnn_resolver(mpnn, channels, act=act, **kwargs)
            self.act = activation_resolver(act)
            self.norm = resolve_norm(norm, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.mpnn.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: OptTensor = None,
                batch: OptTensor = None, num_graphs: int | None = None) -> tuple[Tensor, OptTensor]:
        r"""Runs the forward pass of the module."""
        h, edge_out = self.mpnn(x, edge_index, edge_attr)
        if self.act is None:  # GatedGCN: act, dropout, residual and norm inside
            return h, edge_out
        h = x + F.dropout(self.act(h), self.dropout, self.training)
        if self.norm is not None:
            h = self.norm(h, batch, num_graphs)
        return h, edge_out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, mpnn={self.mpnn!r}, act={self.act_name!r}, "
                f"dropout={self.dropout}, norm={self.norm!r})")

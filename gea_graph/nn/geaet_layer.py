r"""The GEAET layer: local MPNN + global attention + GEANet in parallel, summed, then an FFN."""
from __future__ import annotations

from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Linear, Module
from torch_geometric.nn.resolver import activation_resolver
from torch_geometric.typing import OptTensor

from gea_graph.nn.attention.plan import AttentionPlan
from gea_graph.nn.geanet import GEANet, resolve_norm
from gea_graph.nn.mpnn import GatedGCNLayer, mpnn_resolver


class GEAETLayer(Module):
    r"""The layer of the `"Graph External Attention Enhanced Transformer" <https://arxiv.org/abs/2405.21061>`_
    paper (Eqs. 8–10): a GraphGPS layer with a third, external branch, in the form of the authors' code:

    .. math::
        \mathbf{X}_M, \mathbf{E}_M &= \mathrm{MPNN}(\mathbf{X}, \mathbf{E}, \mathbf{A}), \qquad
        \mathbf{X}_M \leftarrow \mathrm{Norm}\big(\mathbf{X} + \mathrm{Dropout}(\mathbf{X}_M)\big)

        \mathbf{X}_T &= \mathrm{Norm}\big(\mathbf{X} + \mathrm{Dropout}(\mathrm{Attn}(\mathbf{X}))\big)

        \mathbf{X}_G &= \mathrm{Norm}\big(\mathbf{X} + \mathrm{Dropout}(\mathrm{GEA}(\mathbf{X}))\big), \qquad
        \mathbf{E}_G = \mathrm{GEA}(\mathbf{E}_M)

        \mathbf{X}' &= \mathrm{Norm}\big(\mathbf{H} + \mathrm{FFN}(\mathbf{H})\big), \quad
        \mathbf{H} = \mathbf{X}_M + \mathbf{X}_T + \mathbf{X}_G, \quad \mathbf{E}' = \mathbf{E}_G

    with :math:`\mathrm{FFN}(\mathbf{H}) = \mathrm{Dropout}(\mathbf{W}_2\,\mathrm{Dropout}(\mathrm{act}(\mathbf{W}_1
    \mathbf{H})))`. Any branch can be off: ``GEAETLayer(d, mpnn="gcn", attn=None)`` is the paper's GCN+GEANet.
    The wiring, and where the defaults differ from the paper and the authors' code: ``docs/fidelity.md``.

    Args:
        channels (int): Feature size :math:`d`.
        mpnn (str or Module, optional): :obj:`"gatedgcn"`, :obj:`"gcn"`, :obj:`"gin"`, :obj:`"gine"`, a module
            ``(x, edge_index, edge_attr) -> (x, edge_attr)``, or :obj:`None`. (default: :obj:`"gatedgcn"`)
        attn (str or Module, optional): :obj:`"softmax"`, :obj:`"gfsa"`, :obj:`"plaplacian"`, :obj:`"agf"`, a
            dense attention module, or :obj:`None`. (default: :obj:`"softmax"`)
        gea (bool, optional): The GEANet branch (:obj:`False`: a GraphGPS layer). (default: :obj:`True`)
        heads (int, optional): Heads of the global attention. (default: :obj:`4`)
        gea_heads, units, edge_units, shared_unit, norm_scope: GEA's arguments
            (:class:`~gea_graph.nn.ExternalAttention`); :obj:`gea_heads=None` is :obj:`heads`.
        norm (str, optional): :obj:`"batch_norm"`, :obj:`"layer_norm"` (per node), :obj:`"graph_layer_norm"` or
            :obj:`None`; ``norm_kwargs`` its arguments. (default: :obj:`"batch_norm"`)
        act (str, optional): Activation of the FFN, of ``local_out_act`` and inside the MPNN. (default: :obj:`"relu"`)
        use_ffn (bool, optional): The FFN, of width ``ffn_ratio`` :math:`\cdot d`. (default: :obj:`True`)
        dropout (float, optional): Default of the ``*_dropout`` of the branches and FFN. (default: :obj:`0.0`)
        attn_dropout (float, optional): Dropout on the attention weights. (default: :obj:`0.0`)
        attn_impl (str, optional): :obj:`"auto"`, :obj:`"grouped"` or :obj:`"dense"`. (default: :obj:`"auto"`)
        local_out_act (bool, optional): Activation on the MPNN output. (default: :obj:`False`)
        mpnn_kwargs, attn_kwargs, gea_kwargs (Dict[str, Any], optional): Further arguments of the branches, like
            :class:`~torch_geometric.nn.GPSConv`'s; not those the layer sets (:attr:`branch_arguments`).

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, edge indices :math:`(2, |\mathcal{E}|)`, edge features
          :math:`(|\mathcal{E}|, d)` or :obj:`None`, batch :math:`(|\mathcal{V}|)` or :obj:`None`, :obj:`plan`
        - **output:** node features :math:`(|\mathcal{V}|, d)`, edge features :math:`(|\mathcal{E}|, d)` or :obj:`None`
    """

    #: The arguments of each branch that the layer sets from its own arguments
    #: (``{branch: {branch argument: layer argument}}``); ``*_kwargs`` must not repeat them.
    branch_arguments: ClassVar[dict[str, dict[str, str]]] = {
        "mpnn": {"channels": "channels"},
        "attn": {"channels": "channels", "heads": "heads", "dropout": "attn_dropout",
                 "impl": "attn_impl"},
        "gea": {"channels": "channels", "heads": "gea_heads", "units": "units",
                "edge_units": "edge_units", "shared_unit": "shared_unit",
                "norm_scope": "norm_scope", "dropout": "external_dropout", "norm": "norm",
                "norm_kwargs": "norm_kwargs"},
    }

    def __init__(
        self,
        channels: int,
        mpnn: str | Module | None = "gatedgcn",
        attn: str | Module | None = "softmax",
        gea: bool = True,
        heads: int = 4,
        gea_heads: int | None = None,
        units: int | None = None,
        edge_units: bool = False,
        shared_unit: bool = False,
        norm_scope: str = "graph",
        norm: str | None = "batch_norm",
        norm_kwargs: dict[str, Any] | None = None,
        act: str = "relu",
        use_ffn: bool = True,
        ffn_ratio: int = 2,
        dropout: float = 0.0,
        local_dropout: float | None = None,
        global_dropout: float | None = None,
        external_dropout: float | None = None,
        ffn_dropout: float | None = None,
        attn_dropout: float = 0.0,
        attn_impl: str = "auto",
        local_out_act: bool = False,
        mpnn_kwargs: dict[str, Any] | None = None,
        attn_kwargs: dict[str, Any] | None = None,
        gea_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if mpnn is None and attn is None and not gea:
            raise ValueError("GEAETLayer needs at least one of 'mpnn', 'attn' and 'gea'")
        for branch, given in (("mpnn", mpnn_kwargs), ("attn", attn_kwargs), ("gea", gea_kwargs)):
            for key in given or {}:
                if key in self.branch_arguments[branch]:
                    raise ValueError(
                        f"GEAETLayer: {branch}_kwargs[{key!r}] is set by the layer argument "
                        f"{self.branch_arguments[branch][key]!r}; give it there")
        pick = lambda p: float(dropout if p is None else p)
        self.channels = channels
        self.heads = heads
        self.norm_name = norm
        self.use_ffn = use_ffn
        self.local_out_act = local_out_act
        self.local_dropout = pick(local_dropout)
        self.global_dropout = pick(global_dropout)
        self.external_dropout = pick(external_dropout)
        self.ffn_dropout = pick(ffn_dropout)
        self.attn_dropout = float(attn_dropout)
        self._mpnn_name = mpnn if isinstance(mpnn, str) or mpnn is None else type(mpnn).__name__
        self._attn_name = attn if isinstance(attn, str) or attn is None else type(attn).__name__

        # Local branch
        # The layer's activation also acts inside GatedGCN and the GIN/GINE MLPs (authors' code)
        self.mpnn = mpnn_resolver(mpnn, channels, **{"act": act, **(mpnn_kwargs or {})})
        if isinstance(self.mpnn, GatedGCNLayer) and "dropout" not in (mpnn_kwargs or {}):
            self.mpnn.dropout = self.local_dropout
        self._mpnn_residual = bool(getattr(self.mpnn, "includes_residual", False))
        self.norm_local = resolve_norm(norm, channels, norm_kwargs) if self.mpnn is not None else None

        # Global branch
        if attn is None:
            self.attention = None
        elif isinstance(attn, str):
            from gea_graph.nn.attention import attention_resolver
            self.attention = attention_resolver(attn, channels, heads, dropout=self.attn_dropout,
                                                impl=attn_impl, **(attn_kwargs or {}))
        else:
            self.attention = attn
        self.norm_attn = (resolve_norm(norm, channels, norm_kwargs)
                          if self.attention is not None else None)

        # External branch (residual, dropout and norm inside GEANet)
        self.gea = GEANet(channels, heads=gea_heads or heads, units=units, edge_units=edge_units,
                          shared_unit=shared_unit, norm_scope=norm_scope,
                          dropout=self.external_dropout, norm=norm, norm_kwargs=norm_kwargs,
                          **(gea_kwargs or {})) if gea else None

        # FFN and output norm
        self.act = activation_resolver(act)
        if use_ffn:
            self.ffn_in = Linear(channels, ffn_ratio * channels)
            self.ffn_out = Linear(ffn_ratio * channels, channels)
        else:
            self.ffn_in = self.ffn_out = None
        self.norm_out = resolve_norm(norm, channels, norm_kwargs)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for m in (self.mpnn, self.norm_local, self.attention, self.norm_attn, self.gea,
                  self.ffn_in, self.ffn_out, self.norm_out):
            if m is not None and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def aux_loss(self) -> Tensor | None:
        r"""The global attention's auxiliary loss of the last forward (e.g. the AGF orthogonality
        regulariser), or :obj:`None` when it has none. Add it to the task loss."""
        fn = getattr(self.attention, "aux_loss", None)
        return fn() if callable(fn) else None

    @property
    def store_attention(self) -> bool:
        r"""Keep the attention maps of the last forward: the global one in
        ``self.attention.attention`` (:math:`[B, H, N, N]`) and the external one in
        ``self.gea.last_attention`` (:math:`[|\mathcal{V}|, H, S]`)."""
        return any(getattr(m, "store_attention", False) for m in (self.attention, self.gea)
                   if m is not None)

    @store_attention.setter
    def store_attention(self, value: bool) -> None:
        for m in (self.attention, self.gea):
            if m is not None and hasattr(m, "store_attention"):
                m.store_attention = value


    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_attr: OptTensor = None,
        batch: OptTensor = None,
        attn_bias: OptTensor = None,
        num_graphs: int | None = None,
        max_num_nodes: int | None = None,
        plan: AttentionPlan | None = None,
    ) -> tuple[Tensor, OptTensor]:
        r"""Runs the forward pass of the module. :obj:`attn_bias` (dense, padded) is passed to
        the global attention. :obj:`plan`: the batch's attention plan (a model makes one per batch
        and gives it to every layer); without it the layer plans from :obj:`batch`,
        :obj:`num_graphs` and :obj:`max_num_nodes` (the number of nodes of the largest graph, as
        :func:`~torch_geometric.utils.to_dense_batch` takes it). The sizes are optional in eager
        mode, where they save host syncs; with both given the layer has none and compiles with
        ``torch.compile(layer, fullgraph=True, dynamic=True)``."""
        out: OptTensor = None
        edge_out = edge_attr

        if self.mpnn is not None:
            h, edge_out = self.mpnn(x, edge_index, edge_attr)
            if self.local_out_act:
                h = self.act(h)
            if not self._mpnn_residual:
                h = x + F.dropout(h, self.local_dropout, self.training)
            if self.norm_local is not None:
                h = self.norm_local(h, batch, num_graphs)
            out = h

        if self.attention is not None:
            if plan is None:
                plan = AttentionPlan.from_batch_vector(batch, x.size(0), num_graphs, max_num_nodes,
                                                       device=x.device)
            if attn_bias is not None:
                plan = plan.with_bias(attn_bias)
            h = x + F.dropout(self.attention(x, plan), self.global_dropout, self.training)
            if self.norm_attn is not None:
                h = self.norm_attn(h, batch, num_graphs)
            out = h if out is None else out + h
        elif attn_bias is not None:
            raise ValueError("'attn_bias' given but the layer has no global attention")

        if self.gea is not None:
            h, edge_out = self.gea(x, edge_index, edge_out, batch, num_graphs)
            out = h if out is None else out + h

        assert out is not None
        if self.ffn_in is not None:
            h = F.dropout(self.act(self.ffn_in(out)), self.ffn_dropout, self.training)
            out = out + F.dropout(self.ffn_out(h), self.ffn_dropout, self.training)
        if self.norm_out is not None:
            out = self.norm_out(out, batch, num_graphs)
        return out, edge_out

    def __repr__(self) -> str:
        gea = self.gea.attention if self.gea is not None else None
        gea_repr = (f"GEA(heads={gea.heads}, units={gea.units}, edge_units={gea.edge_units}, "
                    f"shared_unit={gea.shared_unit}, norm_scope={gea.norm_scope!r}, "
                    f"eps={gea.eps})" if gea is not None else "None")
        drops = (self.local_dropout, self.global_dropout, self.external_dropout, self.ffn_dropout)
        dropout = (f"dropout={drops[0]}" if len(set(drops)) == 1 else
                   "local_dropout={}, global_dropout={}, external_dropout={}, ffn_dropout={}".format(*drops))
        impl = getattr(self.attention, "impl", None)
        return (f"{self.__class__.__name__}({self.channels}, mpnn={self._mpnn_name!r}, "
                f"attn={self._attn_name!r}{f', attn_impl={impl!r}' if impl not in (None, 'auto') else ''}, "
                f"gea={gea_repr}, "
                f"heads={self.heads}, "
                f"norm={self.norm_name!r}, use_ffn={self.use_ffn}, {dropout})")

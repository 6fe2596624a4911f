r"""Graph external attention (GEA) of GEAET."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear, Module

NORM_SCOPES = ("graph", "batch")
EDGE_HEAD_SPLITS = ("contiguous", "strided")

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class _GroupSoftmax(torch.autograd.Function):
    r"""Softmax over dim 0 within each group of ``index`` (or over all rows), with a hand-written
    backward: for :math:`p = \mathrm{softmax}(a)` and incoming gradient :math:`g`,
    :math:`g_a = p \odot (g - \sum_{\text{group}} g \odot p)`. Only :math:`p` is saved."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, index: Tensor | None, num_groups: int) -> Tensor:
        if logits.size(0) == 0:
            index = None
            p = logits.clone()
        elif index is None:
            p = (logits - logits.amax(dim=0, keepdim=True)).exp_()
            p = p.mul_(p.sum(dim=0, keepdim=True).reciprocal_())
        else:
            size = (num_groups, ) + tuple(logits.shape[1:])
            expanded = index.view((-1, ) + (1, ) * (logits.dim() - 1)).expand_as(logits)
            shift = logits.new_zeros(size).scatter_reduce_(0, expanded, logits, "amax",
                                                           include_self=False)
            p = (logits - shift.index_select(0, index)).exp_()
            total = logits.new_zeros(size).index_add_(0, index, p)
            p = p.mul_(total.reciprocal_().index_select(0, index))
        ctx.save_for_backward(p, index)
        ctx.num_groups = num_groups
        return p

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
        p, index = ctx.saved_tensors
        s = grad * p
        if index is None:
            return s.sub_(p * s.sum(dim=0, keepdim=True)), None, None
        size = (ctx.num_groups, ) + tuple(p.shape[1:])
        total = p.new_zeros(size).index_add_(0, index, s).index_select(0, index)
        return s.sub_(total.mul_(p)), None, None


def group_softmax(logits: Tensor, index: Tensor | None = None,
                  num_groups: int | None = None) -> Tensor:
    r"""Softmax of ``logits`` ``[M, ...]`` over dim 0 within each group of :obj:`index` (one group
    = one graph; :obj:`None` = all rows form one group), computed in at least float32 and
    returned in the input dtype.

    The computation of :func:`torch_geometric.utils.softmax` (per-group max shift, ``exp``,
    per-group sum; no Python loop over graphs) with a hand-written backward. A group's result
    depends only on its own rows.
    """
    dtype = logits.dtype
    if dtype in _LOW_PRECISION:
        logits = logits.float()
    if index is not None and num_groups is None:
        num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
    return _GroupSoftmax.apply(logits, index, num_groups or 0).to(dtype)


class _ExternalUnits(torch.autograd.Function):
    r"""Eq. 3 and the value unit in one autograd node, for logits in base 2 (``a' = a log2 e``):

    .. math::
        p = \mathrm{softmax}_{\text{group}}(a) = \frac{2^{a' - m}}{\sum 2^{a' - m}}, \quad
        q = p\,[\mathbf{W}_v^{\top} \,|\, \mathbf{1}], \quad
        r = \epsilon + q_{:, d_h}, \quad o = q_{:, :d_h} / r, \quad
        \mathrm{out} = o + \mathbf{b}_v

    i.e. :math:`(p / r)\mathbf{W}_v^{\top} + \mathbf{b}_v` with the L1 sum :math:`r` as an extra
    output column of the same product. Backward, for the incoming gradient :math:`G`:
    :math:`G_q = G / r`, :math:`G_p = \ln 2\,(G_q \mathbf{W}_v - \langle G_q, o \rangle)`,
    :math:`G_{a'} = p \odot (G_p - \sum_{\text{group}} G_p \odot p)`,
    :math:`G_{\mathbf{W}_v} = G_q^{\top} p`, :math:`G_{\mathbf{b}_v} = \sum G`.
    Also returns ``p`` and ``1 / r`` (not differentiable) for the attention maps.
    """

    @staticmethod
    def forward(ctx: Any, logits2: Tensor, index: Tensor | None, num_groups: int,
                weight: Tensor, bias: Tensor | None, eps: float
                ) -> tuple[Tensor, Tensor, Tensor]:
        M, H, S = logits2.shape
        dh = weight.size(0)
        if M == 0:
            index = None
            p = logits2.clone()
        elif index is None:
            p = (logits2 - logits2.amax(dim=0, keepdim=True)).exp2_()
            p = p.mul_(p.sum(dim=0, keepdim=True).reciprocal_())
        else:
            expanded = index.view(-1, 1, 1).expand_as(logits2)
            shift = logits2.new_zeros(num_groups, H, S).scatter_reduce_(
                0, expanded, logits2, "amax", include_self=False)
            p = (logits2 - shift.index_select(0, index)).exp2_()
            total = logits2.new_zeros(num_groups, H, S).index_add_(0, index, p)
            p = p.mul_(total.reciprocal_().index_select(0, index))
        p2 = p.view(M * H, S)
        q = p2 @ torch.cat([weight, weight.new_ones(1, S)], dim=0).t()  # [MH, dh + 1]
        rinv = (q[:, dh] + eps).reciprocal_()
        o = q[:, :dh] * rinv.unsqueeze(1)
        out = o + bias if bias is not None else o.clone()
        ctx.save_for_backward(p2, o, rinv, weight, index)
        ctx.num_groups = num_groups
        ctx.has_bias = bias is not None
        ctx.mark_non_differentiable(p, rinv)
        return out.view(M, H, dh), p, rinv.view(M, H, 1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _gp: Any, _gr: Any) -> tuple[Any, ...]:
        p2, o, rinv, weight, index = ctx.saved_tensors
        M_H, S = p2.shape
        dh = weight.size(0)
        g = grad.reshape(M_H, dh)
        gq = g * rinv.unsqueeze(1)
        c = (gq * o).sum(dim=1, keepdim=True)  # <G_q, o> per row
        # G_p = ln2 (G_q W - c): the ln 2 of d 2^x / dx, folded into the product
        gp = torch.addmm(c.expand(M_H, S), gq, weight, beta=-_LN2, alpha=_LN2)
        grad_weight = gq.t() @ p2
        grad_bias = g.sum(dim=0) if ctx.has_bias else None
        s = gp.mul_(p2).view(-1, *grad.shape[1:2], S)
        if index is None:
            ga = s - p2.view_as(s) * s.sum(dim=0, keepdim=True)
        else:
            total = s.new_zeros(ctx.num_groups, s.size(1), S).index_add_(0, index, s)
            ga = s.sub_(total.index_select(0, index).mul_(p2.view_as(s)))
        return ga, None, None, grad_weight, grad_bias, None


_LN2 = 0.6931471805599453
_LOG2E = 1.4426950408889634


def double_normalize(logits: Tensor, index: Tensor | None = None,
                     num_groups: int | None = None, eps: float = 1e-9) -> Tensor:
    r"""The double normalisation of GEAET Eq. 3 on ``logits`` of shape ``[M, H, S]``: the
    :func:`group_softmax` over the rows (nodes or edges) per head and unit column, then an L1
    normalisation over the units (last dim) with :obj:`eps` in the denominator."""
    p = group_softmax(logits, index, num_groups)
    return p / (p.sum(dim=-1, keepdim=True) + eps)


class ExternalAttention(Module):
    r"""Multi-head graph external attention (GEA) from the `"Graph External Attention Enhanced
    Transformer" <https://arxiv.org/abs/2405.21061>`_ paper (ICML 2024).

    Every node attends to :math:`S` learnable *external units* (parameters shared by all graphs)
    instead of to the other nodes. With the key/value units of Eq. 4, heads as in Eq. 5 and the
    double normalisation of Eq. 3, for head :math:`h` and the :math:`h`-th channel slice
    :math:`\mathbf{X}_h \in \mathbb{R}^{n \times d/H}` of :math:`\mathbf{X}` (optionally after the
    shared unit, :math:`\mathbf{X} \leftarrow \mathbf{X}\mathbf{U}_s`):

    .. math::
        \tilde{\alpha}^{(h)} &= \mathbf{X}_h \mathbf{U}_{nk}^{\top} + \mathbf{b}_{nk}
        \in \mathbb{R}^{n \times S} \qquad \text{(Eqs. 2, 4)}

        \hat{\alpha}^{(h)}_{i,s} &= \frac{\exp \tilde{\alpha}^{(h)}_{i,s}}
        {\sum_{k \in \mathcal{G}(i)} \exp \tilde{\alpha}^{(h)}_{k,s}}, \qquad
        \alpha^{(h)}_{i,s} = \frac{\hat{\alpha}^{(h)}_{i,s}}
        {\epsilon + \sum_{t=1}^{S} \hat{\alpha}^{(h)}_{i,t}} \qquad \text{(Eq. 3)}

        \mathbf{X}_{\mathrm{out}} &= \Big\Vert_{h=1}^{H} \big(\alpha^{(h)} \mathbf{U}_{nv}
        + \mathbf{b}_{nv}\big) \; [\mathbf{W}_o] \qquad \text{(Eqs. 4, 5)}

    with :math:`\mathbf{U}_{nk} \in \mathbb{R}^{S \times d/H}`,
    :math:`\mathbf{U}_{nv} \in \mathbb{R}^{d/H \times S}` shared by all heads (Eq. 5). The same
    applies to edge features with their own units :math:`\mathbf{U}_{ek}, \mathbf{U}_{ev}` and the
    softmax running over edges (Eq. 4, second line). :math:`\mathcal{G}(i)` is the set the softmax
    runs over, chosen by :obj:`norm_scope`.

    **What is mixed across nodes and graphs** (GEAET issue #1). GEA is *not* an
    :math:`n \times n` attention: apart from the softmax denominator of Eq. 3, it is a node-wise
    map :math:`\mathbf{x}_i \mapsto \sum_s \alpha_{i,s} \mathbf{u}^{v}_s`. The only coupling
    between nodes is that each unit's softmax is normalised over a set of nodes (the column sum in
    Eq. 3): a node's output depends on the other nodes of that set only through those :math:`S
    \cdot H` scalar denominators. No features are passed between nodes. The "external memory"
    shared across graphs is the parameters :math:`\mathbf{U}`, as in any layer.

    * :obj:`norm_scope="graph"` (default): the softmax runs over the nodes (edges) of each graph,
      so **nothing crosses graphs**: a graph's output is the same whatever else is in its
      mini-batch (and equal to running it alone).
    * :obj:`norm_scope="batch"`: the authors' code (softmax over dim 0 of the whole PyG
      mini-batch). Every output then depends on all batch-mates, on the batch size and on the
      batch composition, also in evaluation. Use it only to reproduce the authors' numbers.

    Open choices (paper vs. the authors' code, geaet-notes §1.8 and §6):

    * Heads: the authors' contiguous split of the channels into :math:`H` slices of width
      :math:`d/H`; the units are :class:`~torch.nn.Linear` maps :math:`d/H \to S` and
      :math:`S \to d/H` *with bias*, as in their code. Unlike their code, :math:`S` (:obj:`units`)
      is free (they assert :math:`S = d/H`; every paper configuration has it).
    * :math:`\mathbf{W}_o` (Eq. 5) is optional (:obj:`out_proj`), off by default as in the code, so
      the paper's parameter counts reproduce.
    * Shared unit :math:`\mathbf{U}_s` (Eq. 4): one :math:`d \times d` :class:`~torch.nn.Linear`
      (with bias, as in the code) applied to both nodes and edges before the head split. The
      authors' code crashes with a shared unit but no edge units; here it simply applies to nodes.
    * Edge head split: the authors split edge channels *strided* (channel :math:`c` goes to head
      :math:`c \bmod H`) but write the result back head-major, so their edge output channels come
      out permuted relative to the input (a fixed permutation each layer). The default here is the
      same contiguous split as for nodes (:obj:`edge_head_split="contiguous"`), which keeps edge
      channels aligned with the residual stream of the next MPNN; :obj:`"strided"` reproduces the
      authors' layout exactly.
    * :math:`\epsilon` (:obj:`eps`, default :math:`10^{-9}` as in Guo et al.'s code; the paper and
      GEAET code have none) keeps the L1 step finite; the softmax always runs in at least
      float32 (a softmax over thousands of nodes underflows in bfloat16/float16).
    * Implementation: the L1 step is folded into the value unit,
      :math:`(\hat{\alpha}/r)\mathbf{U}_{nv}^{\top} = (\hat{\alpha}\mathbf{U}_{nv}^{\top})/r` with
      :math:`r = \epsilon + \sum_s \hat{\alpha}_s` computed as an extra output column of the same
      matrix product, and the per-graph softmax has a hand-written backward; the normalised map
      :math:`\alpha` is only formed when it is asked for.

    Attention maps: set :obj:`store_attention=True` (constructor or attribute) and read
    :attr:`attention` (:math:`[N, H, S]`, detached, rows sum to 1 over the units) and
    :attr:`edge_attention` (:math:`[E, H, S]` or :obj:`None`) after a forward; or call
    ``forward(..., return_attention=True)``, which returns
    ``(x_out, edge_out, node_attention, edge_attention)``. One graph's map is
    ``attention[batch == g]``.

    Args:
        channels (int): Size :math:`d` of node (and edge) features.
        heads (int, optional): Number of heads :math:`H` (must divide :obj:`channels`).
            (default: :obj:`1`)
        units (int, optional): Number of external units :math:`S`. :obj:`None` means
            :math:`d/H`, the authors' setting. (default: :obj:`None`)
        edge_units (bool, optional): Also transform edge features with edge units
            :math:`\mathbf{U}_{ek}, \mathbf{U}_{ev}`. Otherwise edge features pass through
            unchanged. (default: :obj:`False`)
        shared_unit (bool, optional): Apply the shared unit :math:`\mathbf{U}_s` first.
            (default: :obj:`False`)
        norm_scope (str, optional): :obj:`"graph"` or :obj:`"batch"` (see above).
            (default: :obj:`"graph"`)
        out_proj (bool, optional): Apply the output projection :math:`\mathbf{W}_o` of Eq. 5 (to
            nodes, and to edges when :obj:`edge_units`). (default: :obj:`False`)
        bias (bool, optional): Biases in the units (and :math:`\mathbf{U}_s`,
            :math:`\mathbf{W}_o`). (default: :obj:`True`)
        eps (float, optional): :math:`\epsilon` of the L1 step. (default: :obj:`1e-9`)
        edge_head_split (str, optional): :obj:`"contiguous"` or :obj:`"strided"` (authors).
            (default: :obj:`"contiguous"`)
        store_attention (bool, optional): Keep the last attention maps (see above).
            (default: :obj:`False`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, d)`, batch vector
          :math:`(|\mathcal{V}|)` or :obj:`None` (one graph), edge features
          :math:`(|\mathcal{E}|, d)` (optional), edge batch vector :math:`(|\mathcal{E}|)`
          (needed with :obj:`edge_units`, :obj:`norm_scope="graph"` and a batch of several graphs)
        - **output:** node features :math:`(|\mathcal{V}|, d)`, edge features
          :math:`(|\mathcal{E}|, d)` (the input edge features when :obj:`edge_units=False`)
    """

    def __init__(
        self,
        channels: int,
        heads: int = 1,
        units: int | None = None,
        edge_units: bool = False,
        shared_unit: bool = False,
        norm_scope: str = "graph",
        out_proj: bool = False,
        bias: bool = True,
        eps: float = 1e-9,
        edge_head_split: str = "contiguous",
        store_attention: bool = False,
    ) -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
        if norm_scope not in NORM_SCOPES:
            raise ValueError(f"'norm_scope' must be one of {NORM_SCOPES}, got {norm_scope!r}")
        if edge_head_split not in EDGE_HEAD_SPLITS:
            raise ValueError(f"'edge_head_split' must be one of {EDGE_HEAD_SPLITS}, "
                             f"got {edge_head_split!r}")
        self.channels = channels
        self.heads = heads
        self.head_channels = channels // heads
        self.units = self.head_channels if units is None else int(units)
        self.edge_units = edge_units
        self.shared_unit = shared_unit
        self.norm_scope = norm_scope
        self.eps = eps
        self.edge_head_split = edge_head_split
        self.store_attention = store_attention
        self.attention: Tensor | None = None
        self.edge_attention: Tensor | None = None

        self.shared = Linear(channels, channels, bias=bias) if shared_unit else None
        self.node_key = Linear(self.head_channels, self.units, bias=bias)
        self.node_value = Linear(self.units, self.head_channels, bias=bias)
        self.out = Linear(channels, channels, bias=bias) if out_proj else None
        if edge_units:
            self.edge_key = Linear(self.head_channels, self.units, bias=bias)
            self.edge_value = Linear(self.units, self.head_channels, bias=bias)
            self.edge_out = Linear(channels, channels, bias=bias) if out_proj else None
        else:
            self.edge_key = self.edge_value = self.edge_out = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for lin in (self.shared, self.node_key, self.node_value, self.out, self.edge_key,
                    self.edge_value, self.edge_out):
            if lin is not None:
                lin.reset_parameters()
        self.attention = None
        self.edge_attention = None

    def _attend(self, h: Tensor, key: Linear, value: Linear, index: Tensor | None,
                num_groups: int | None, strided: bool,
                need_attention: bool) -> tuple[Tensor, Tensor | None]:
        M, dh = h.size(0), self.head_channels
        if strided:  # authors' edge layout: channel c -> head c mod H, written back head-major
            h = h.view(M, dh, self.heads).transpose(1, 2)
        else:
            h = h.view(M, self.heads, dh)
        # Fold log2(e) into the key unit so that the softmax can use exp2 (cheaper than exp).
        w_k = key.weight * _LOG2E
        b_k = key.bias * _LOG2E if key.bias is not None else None
        logits2 = torch.nn.functional.linear(h, w_k, b_k)  # [M, H, S]
        dtype = logits2.dtype
        compute = torch.float32 if dtype in _LOW_PRECISION else dtype
        if index is not None and num_groups is None:
            num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
        with torch.autocast(h.device.type, enabled=False):
            b_v = value.bias.to(compute) if value.bias is not None else None
            out, p, rinv = _ExternalUnits.apply(logits2.to(compute), index, num_groups or 0,
                                                value.weight.to(compute), b_v, self.eps)
        out = out.to(dtype)
        attn = (p * rinv).to(dtype) if need_attention else None
        return out.reshape(M, self.channels), attn

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        edge_attr: Tensor | None = None,
        edge_batch: Tensor | None = None,
        return_attention: bool = False,
        num_graphs: int | None = None,
    ) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor, Tensor | None]:
        r"""Runs the forward pass of the module.

        Args:
            x (torch.Tensor): Node features :math:`[N, d]`.
            batch (torch.Tensor, optional): Graph id of every node (:obj:`None`: one graph).
            edge_attr (torch.Tensor, optional): Edge features :math:`[E, d]`.
            edge_batch (torch.Tensor, optional): Graph id of every edge (e.g.
                ``batch[edge_index[0]]``).
            return_attention (bool, optional): Also return the node and edge attention maps
                :math:`[N, H, S]`, :math:`[E, H, S]` (without gradient). (default: :obj:`False`)
            num_graphs (int, optional): Number of graphs, saves a device sync.
        """
        graph = self.norm_scope == "graph"
        if self.shared is not None:
            x = self.shared(x)
        node_index = batch if graph else None
        need = return_attention or self.store_attention
        x_out, attn = self._attend(x, self.node_key, self.node_value, node_index, num_graphs,
                                   False, need)
        if self.out is not None:
            x_out = self.out(x_out)

        edge_out, edge_attn = edge_attr, None
        if self.edge_units and edge_attr is not None:
            e = self.shared(edge_attr) if self.shared is not None else edge_attr
            edge_index_ = None
            if graph:
                if edge_batch is None and batch is not None and e.size(0) > 0:
                    if num_graphs == 1:
                        edge_batch = None
                    else:
                        raise ValueError(
                            "ExternalAttention(edge_units=True, norm_scope='graph') needs "
                            "'edge_batch' (e.g. batch[edge_index[0]]) for a batch of graphs")
                edge_index_ = edge_batch
            edge_out, edge_attn = self._attend(e, self.edge_key, self.edge_value, edge_index_,
                                               num_graphs, self.edge_head_split == "strided",
                                               need)
            if self.edge_out is not None:
                edge_out = self.edge_out(edge_out)

        if self.store_attention and attn is not None:
            self.attention = attn.detach()
            self.edge_attention = edge_attn.detach() if edge_attn is not None else None
        if return_attention:
            return x_out, edge_out, attn, edge_attn
        return x_out, edge_out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
                f"units={self.units}, edge_units={self.edge_units}, "
                f"shared_unit={self.shared_unit}, norm_scope={self.norm_scope!r}, "
                f"out_proj={self.out is not None})")

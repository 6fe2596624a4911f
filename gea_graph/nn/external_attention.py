r"""Graph external attention (GEA) of GEAET."""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Linear, Module

NORM_SCOPES = ("graph", "batch")
EDGE_HEAD_SPLITS = ("contiguous", "strided")

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class _DoubleNorm(torch.autograd.Function):
    r"""Eq. 3 with a hand-written backward (fewer passes and saved tensors than autograd).

    Forward: :math:`p = \mathrm{softmax}_{\text{group}}(a)` per column, :math:`r = \epsilon +
    \sum_s p_s`, :math:`\alpha = p / r`. Backward, for the incoming gradient :math:`g`:
    :math:`g_p = (g - \langle g, \alpha \rangle_s) / r` and
    :math:`g_a = p \odot (g_p - \sum_{\text{group}} g_p \odot p)`.
    """

    @staticmethod
    def forward(ctx: Any, logits: Tensor, index: Optional[Tensor], num_groups: int,
                eps: float) -> Tensor:
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
        r = p.sum(dim=-1, keepdim=True).add_(eps)
        ctx.save_for_backward(p, r, index)
        ctx.num_groups = num_groups
        return p / r

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], None, None, None]:
        p, r, index = ctx.saved_tensors
        gp = grad - (grad * p).sum(dim=-1, keepdim=True).div_(r)
        gp = gp.div_(r)
        s = gp * p
        if index is None:
            gp = gp.sub_(s.sum(dim=0, keepdim=True))
        else:
            size = (ctx.num_groups, ) + tuple(p.shape[1:])
            gp = gp.sub_(p.new_zeros(size).index_add_(0, index, s).index_select(0, index))
        return gp.mul_(p), None, None, None


def double_normalize(logits: Tensor, index: Optional[Tensor] = None,
                     num_groups: Optional[int] = None, eps: float = 1e-9) -> Tensor:
    r"""The double normalisation of GEAET Eq. 3 on ``logits`` of shape ``[M, H, S]``.

    First a softmax over the rows (dim 0: the nodes or edges), separately for every head and unit
    column, within each group of :obj:`index` (one group = one graph; :obj:`None` = all rows form
    one group); then an L1 normalisation over the units (last dim) with :obj:`eps` in the
    denominator. Runs in at least float32 and returns the input dtype.

    The grouped softmax is the computation of :func:`torch_geometric.utils.softmax` (per-group
    max shift, ``exp``, per-group sum, no Python loop over graphs), written with
    ``scatter_reduce_`` / ``index_add_`` and fused with the L1 step into one autograd function, so
    that forward + backward make few passes over the ``[M, H, S]`` map. A group's result depends
    only on its own rows.
    """
    dtype = logits.dtype
    if dtype in _LOW_PRECISION:
        logits = logits.float()
    if index is not None and num_groups is None:
        num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
    return _DoubleNorm.apply(logits, index, num_groups or 0, eps).to(dtype)


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
      GEAET code have none) keeps the L1 step finite; the normalisation always runs in at least
      float32 (a softmax over thousands of nodes underflows in bfloat16/float16).

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
        units: Optional[int] = None,
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
        self.attention: Optional[Tensor] = None
        self.edge_attention: Optional[Tensor] = None

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

    def _attend(self, h: Tensor, key: Linear, value: Linear, index: Optional[Tensor],
                num_groups: Optional[int], strided: bool) -> Tuple[Tensor, Tensor]:
        M = h.size(0)
        if strided:  # authors' edge layout: channel c -> head c mod H, written back head-major
            h = h.view(M, self.head_channels, self.heads).transpose(1, 2)
        else:
            h = h.view(M, self.heads, self.head_channels)
        attn = double_normalize(key(h), index, num_groups, self.eps)  # [M, H, S]
        return value(attn).reshape(M, self.channels), attn

    def forward(
        self,
        x: Tensor,
        batch: Optional[Tensor] = None,
        edge_attr: Optional[Tensor] = None,
        edge_batch: Optional[Tensor] = None,
        return_attention: bool = False,
        num_graphs: Optional[int] = None,
    ) -> Union[Tuple[Tensor, Optional[Tensor]],
               Tuple[Tensor, Optional[Tensor], Tensor, Optional[Tensor]]]:
        r"""Runs the forward pass of the module.

        Args:
            x (torch.Tensor): Node features :math:`[N, d]`.
            batch (torch.Tensor, optional): Graph id of every node (:obj:`None`: one graph).
            edge_attr (torch.Tensor, optional): Edge features :math:`[E, d]`.
            edge_batch (torch.Tensor, optional): Graph id of every edge (e.g.
                ``batch[edge_index[0]]``).
            return_attention (bool, optional): Also return the node and edge attention maps
                :math:`[N, H, S]`, :math:`[E, H, S]` (not detached). (default: :obj:`False`)
            num_graphs (int, optional): Number of graphs, saves a device sync.
        """
        graph = self.norm_scope == "graph"
        if self.shared is not None:
            x = self.shared(x)
        node_index = batch if graph else None
        x_out, attn = self._attend(x, self.node_key, self.node_value, node_index, num_graphs,
                                   False)
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
                                               num_graphs, self.edge_head_split == "strided")
            if self.edge_out is not None:
                edge_out = self.edge_out(edge_out)

        if self.store_attention:
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

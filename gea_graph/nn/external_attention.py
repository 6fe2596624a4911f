r"""Graph external attention (GEA) of GEAET."""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor
from torch.nn import Linear, Module
from torch_geometric.utils import scatter

from .norm import real_row_mask

NORM_SCOPES = ("graph", "batch")
EDGE_HEAD_SPLITS = ("contiguous", "strided")


def group_log_softmax(logits: Tensor, index: Tensor | None, num_groups: int, real: Tensor | None = None) -> Tensor:
    r"""Log-softmax of ``logits`` ``[M, ...]`` over dim 0 within each group of :obj:`index` (a segment softmax
    as :func:`torch_geometric.utils.softmax`, in log space; :obj:`None`: all rows form one group). Each group is
    shifted by its maximum, so the result is exact for any logits, and a group's rows depend only on that group.
    With :obj:`index` :obj:`None`, :obj:`real` (``[M]`` bool) leaves the other rows out of the sum: theirs are finite
    and no row of :obj:`real` depends on them."""
    if index is None:
        if real is None:
            return torch.log_softmax(logits, dim=0)
        left_out = ~real.view(-1, *([1] * (logits.dim() - 1)))
        return logits - torch.logsumexp(logits.masked_fill(left_out, float("-inf")), dim=0, keepdim=True)
    shift = scatter(logits.detach(), index, 0, num_groups, reduce="max").index_select(0, index)
    z = logits - shift
    return z - scatter(z.exp(), index, 0, num_groups, reduce="sum").log().index_select(0, index)


class ExternalAttention(Module):
    r"""Multi-head graph external attention (GEA) from the `"Graph External Attention Enhanced Transformer"
    <https://arxiv.org/abs/2405.21061>`_ paper: every node attends to :math:`S` learnable external units shared by
    all graphs. For head :math:`h` and its channel slice :math:`\mathbf{X}_h \in \mathbb{R}^{n \times d/H}`
    (optionally after the shared unit, :math:`\mathbf{X} \leftarrow \mathbf{X}\mathbf{U}_s`):

    .. math::
        \tilde{\alpha}^{(h)} &= \mathbf{X}_h \mathbf{U}_{k}^{\top} + \mathbf{b}_{k} \qquad \text{(Eqs. 2, 4)}

        \hat{\alpha}^{(h)}_{i,s} &= \frac{\exp \tilde{\alpha}^{(h)}_{i,s}}
        {\sum_{j \in \mathcal{G}(i)} \exp \tilde{\alpha}^{(h)}_{j,s}}, \qquad
        \alpha^{(h)}_{i,s} = \frac{\hat{\alpha}^{(h)}_{i,s}}{\epsilon + \sum_{t=1}^{S} \hat{\alpha}^{(h)}_{i,t}}
        \qquad \text{(Eq. 3)}

        \mathbf{X}_{\mathrm{out}} &= \Big\Vert_{h=1}^{H} \big(\alpha^{(h)} \mathbf{U}_{v}^{\top} + \mathbf{b}_{v}\big)
        \,[\mathbf{W}_o] \qquad \text{(Eqs. 4, 5)}

    with units :math:`\mathbf{U}_k \in \mathbb{R}^{S \times d/H}`, :math:`\mathbf{U}_v \in \mathbb{R}^{d/H \times S}`
    shared by the heads. Edge features get the same with their own units. :math:`\mathcal{G}(i)` is the graph of
    node :math:`i` (:obj:`norm_scope="graph"`: a segment softmax over ``batch``, so a graph's output never depends on
    its batch-mates) or the whole mini-batch (:obj:`"batch"`, the authors' code; within
    :func:`~gea_graph.nn.norm.padding_rows` its real rows only, so a fixed-size batch's padding changes nothing). The
    softmax is computed in log space in at least float32; with :obj:`eps=None`,
    :math:`\alpha = \mathrm{softmax}_s(\log \hat{\alpha})`, the exact value of the authors'
    :math:`\hat{\alpha} / \sum_t \hat{\alpha}_t` also where every :math:`\hat{\alpha}` of a node underflows.
    Where this differs from the paper and the authors' code: ``docs/fidelity.md``.

    Args:
        channels (int): Size :math:`d` of node (and edge) features.
        heads (int, optional): Number of heads :math:`H` (divides :obj:`channels`). (default: :obj:`1`)
        units (int, optional): Number of units :math:`S` (:obj:`None`: :math:`d/H`). (default: :obj:`None`)
        edge_units (bool, optional): Edge units too (otherwise edges pass through). (default: :obj:`False`)
        shared_unit (bool, optional): Apply :math:`\mathbf{U}_s` first. (default: :obj:`False`)
        norm_scope (str, optional): :obj:`"graph"` or :obj:`"batch"`. (default: :obj:`"graph"`)
        out_proj (bool, optional): Apply :math:`\mathbf{W}_o` (Eq. 5). (default: :obj:`False`)
        bias (bool, optional): Biases in the units, :math:`\mathbf{U}_s` and :math:`\mathbf{W}_o`.
            (default: :obj:`True`)
        eps (float, optional): :math:`\epsilon` of Eq. 3 (:obj:`None`: none). (default: :obj:`1e-9`)
        edge_head_split (str, optional): :obj:`"contiguous"` or :obj:`"strided"` (channel :math:`c` to head
            :math:`c \bmod H`, the authors' edge layout). (default: :obj:`"contiguous"`)
        store_attention (bool, optional): Keep the last maps in :attr:`attention` (:math:`[N, H, S]`, detached)
            and :attr:`edge_attention`. (default: :obj:`False`)

    Shapes:
        - **input:** node features :math:`(N, d)`, batch vector :math:`(N)` or :obj:`None` (one graph), edge
          features :math:`(E, d)` (optional), edge batch vector :math:`(E)` (needed with edge units per graph)
        - **output:** node features :math:`(N, d)`, edge features :math:`(E, d)` (or the input edge features)
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
        eps: float | None = 1e-9,
        edge_head_split: str = "contiguous",
        store_attention: bool = False,
    ) -> None:
        super().__init__()
        if channels % heads != 0:
            raise ValueError(f"'channels' ({channels}) must be divisible by 'heads' ({heads})")
        if eps is not None and eps < 0:
            raise ValueError(f"'eps' must be >= 0 or None, got {eps!r}")
        if norm_scope not in NORM_SCOPES:
            raise ValueError(f"'norm_scope' must be one of {NORM_SCOPES}, got {norm_scope!r}")
        if edge_head_split not in EDGE_HEAD_SPLITS:
            raise ValueError(f"'edge_head_split' must be one of {EDGE_HEAD_SPLITS}, got {edge_head_split!r}")
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
        for lin in (self.shared, self.node_key, self.node_value, self.out, self.edge_key, self.edge_value,
                    self.edge_out):
            if lin is not None:
                lin.reset_parameters()
        self.attention = None
        self.edge_attention = None

    def _attend(self, h: Tensor, key: Linear, value: Linear, index: Tensor | None, num_groups: int | None,
                strided: bool) -> tuple[Tensor, Tensor]:
        # Eq. 3 between the two units, for rows h [M, d]; returns [M, d] and the map [M, H, S].
        M, H, dh = h.size(0), self.heads, self.head_channels
        h = h.view(M, dh, H).transpose(1, 2) if strided else h.view(M, H, dh)
        if index is not None and num_groups is None:
            num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
        # In at least float32 with autocast off: a softmax over thousands of rows underflows in half precision.
        device = h.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
        compute = torch.float64 if h.dtype == torch.float64 else torch.float32  # at least float32
        weights = [t if t is None else t.to(compute) for t in (key.weight, key.bias, value.weight, value.bias)]
        with torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else nullcontext():
            logits = torch.nn.functional.linear(h.to(compute), weights[0], weights[1])  # [M, H, S]
            # a padded batch's padding rows are left out of the batch-wide softmax (gea_graph.train.fixed_size)
            real = real_row_mask(M) if index is None else None
            log_p = group_log_softmax(logits, index, num_groups or 0, real)
            if self.eps is None:
                alpha = torch.softmax(log_p, dim=-1)
            else:
                p = log_p.exp()
                alpha = p / (p.sum(dim=-1, keepdim=True) + self.eps)
            out = torch.nn.functional.linear(alpha, weights[2], weights[3])  # [M, H, d/H]
        if h.dtype == torch.float64:
            dtype = torch.float64
        return out.reshape(M, self.channels).to(dtype), alpha.detach().to(dtype)

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
            edge_batch (torch.Tensor, optional): Graph id of every edge (e.g. ``batch[edge_index[0]]``).
            return_attention (bool, optional): Also return the node and edge attention maps :math:`[N, H, S]`,
                :math:`[E, H, S]` (detached). (default: :obj:`False`)
            num_graphs (int, optional): Number of graphs (saves a device sync).
        """
        graph = self.norm_scope == "graph"
        if self.shared is not None:
            x = self.shared(x)
        x_out, attn = self._attend(x, self.node_key, self.node_value, batch if graph else None, num_graphs, False)
        if self.out is not None:
            x_out = self.out(x_out)

        edge_out, edge_attn = edge_attr, None
        if self.edge_units and edge_attr is not None:
            e = self.shared(edge_attr) if self.shared is not None else edge_attr
            edge_index_ = None
            if graph:
                if edge_batch is None and batch is not None and e.size(0) > 0 and num_graphs != 1:
                    raise ValueError("ExternalAttention(edge_units=True, norm_scope='graph') needs 'edge_batch' "
                                     "(e.g. batch[edge_index[0]]) for a batch of graphs")
                edge_index_ = edge_batch
            edge_out, edge_attn = self._attend(e, self.edge_key, self.edge_value, edge_index_, num_graphs,
                                               self.edge_head_split == "strided")
            if self.edge_out is not None:
                edge_out = self.edge_out(edge_out)

        if self.store_attention:
            self.attention, self.edge_attention = attn, edge_attn
        if return_attention:
            return x_out, edge_out, attn, edge_attn
        return x_out, edge_out

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, units={self.units}, "
                f"edge_units={self.edge_units}, shared_unit={self.shared_unit}, norm_scope={self.norm_scope!r}, "
                f"out_proj={self.out is not None}, eps={self.eps}, edge_head_split={self.edge_head_split!r})")

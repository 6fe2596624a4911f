r"""p-Laplacian attention (p-LaT, Nguyen et al., 2023)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .multihead import DenseAttentionBase


def default_p(heads: int, low: float = 1.5, high: float = 2.5) -> list[float]:
    r"""The paper's split: half the heads ``low``, half ``high``; with an odd head count the middle
    head gets ``p = 2`` (plain softmax), so one head never decides the balance."""
    half = heads // 2
    return [low] * half + ([2.0] if heads % 2 else []) + [high] * half


def _fast_pow(x: Tensor, e: float) -> Tensor:
    # x ** e for x > 0; quarter/half powers (the default p = 1.5 / 2.5 give e = -/+0.25) through sqrt/rsqrt, which
    # are correctly rounded: a generic pow's vectorised and scalar loops round differently, so near the clamp (huge
    # powers) a graph's output would depend on where its rows fall in the batch.
    if e == 0.25:
        return x.sqrt().sqrt()
    if e == -0.25:
        return x.sqrt().rsqrt()
    if e == 0.5:
        return x.sqrt()
    if e == -0.5:
        return x.rsqrt()
    if e == 1.0:
        return x
    if e == -1.0:
        return x.reciprocal()
    return x.pow(e)


class PLaplacianAttention(DenseAttentionBase):
    r"""The p-Laplacian attention of Nguyen et al., `"p-Laplacian Transformer"
    <https://arxiv.org/abs/2311.03235>`_ (Eqs. 11-12, Fig. 1): softmax weights re-weighted, per head, by a power of
    the distance between the value vectors,

    .. math::
        \mathbf{u}_i^{(h)} = \sum_{j} \bar{A}^{(h)}_{ij}\, P^{(h)}_{ij}\, \mathbf{v}^{(h)}_j,
        \qquad P^{(h)}_{ij} = \left(\lVert \mathbf{v}^{(h)}_i - \mathbf{v}^{(h)}_j \rVert_2^2
            + \epsilon\right)^{(p_h - 2)/2}

    with :math:`\bar{\mathbf{A}}^{(h)}` the biased, masked softmax attention (dropout acts on it, before
    :math:`\odot\mathbf{P}`), :math:`\mathbf{v}^{(h)}` the per-head values after :math:`\mathbf{W}_V`, and
    :math:`p_h` fixed per head (not learned). At :math:`p_h = 2`, :math:`\mathbf{P} \equiv 1` and the head is softmax
    attention. :math:`\epsilon > 0` keeps :math:`\mathbf{P}` finite, continuous and permutation-equivariant
    where value vectors coincide (the diagonal is :math:`\epsilon^{(p_h-2)/2}` exactly). Rows are not renormalised
    unless :obj:`renormalize` (the paper relies on row sums :math:`\neq 1`). The paper's ambiguities and the choices
    made for them: ``docs/fidelity.md``.

    Args:
        channels (int): Size of each input and output node feature :math:`C`.
        heads (int): Number of heads :math:`H`.
        p (float or Sequence[float], optional): :math:`p` for all heads, or one per head; :obj:`None`: half the
            heads 1.5, half 2.5 (odd :math:`H`: the middle head 2). (default: :obj:`None`)
        eps (float, optional): :math:`\epsilon` added to the squared distance. (default: :obj:`1e-2`)
        renormalize (bool, optional): Row-renormalise :math:`\bar{\mathbf{A}}\odot\mathbf{P}`. (default: :obj:`False`)
        detach_p (bool, optional): No gradient through :math:`\mathbf{P}`. (default: :obj:`False`)
        dropout (float, optional): Attention dropout probability. (default: :obj:`0.0`)
        bias (bool, optional): Bias in the projections. (default: :obj:`True`)
        impl (str, optional): How a packed call runs: :obj:`"auto"`, :obj:`"grouped"` or :obj:`"dense"` (see
            :class:`~gea_graph.nn.attention.multihead.DenseAttentionBase`). (default: :obj:`"auto"`)

    Shapes:
        - **input:** :math:`(B, N, C)`, mask :math:`(B, N)` bool, optional bias :math:`(B, H, N, N)`; or packed
          :math:`(\sum N_i, C)` and a plan
        - **output:** :math:`(B, N, C)`, padded rows zero; or :math:`(\sum N_i, C)`
    """

    def __init__(self, channels: int, heads: int, p: float | Sequence[float] | None = None,
                 eps: float = 1e-2, renormalize: bool = False, detach_p: bool = False,
                 dropout: float = 0.0, bias: bool = True, impl: str = "auto") -> None:
        super().__init__(channels, heads, dropout=dropout, bias=bias, impl=impl)
        if p is None:
            p_list = default_p(heads)
        elif isinstance(p, (int, float)):
            p_list = [float(p)] * heads
        else:
            p_list = [float(v) for v in p]
        if len(p_list) != heads:
            raise ValueError(f"Expected {heads} values of 'p', got {len(p_list)}")
        if eps <= 0:
            raise ValueError("'eps' must be > 0 (the distance power is singular at 0)")
        self.p = p_list
        self.eps = float(eps)
        self.renormalize = renormalize
        self.detach_p = detach_p
        self.register_buffer("exponent", (torch.tensor(p_list) - 2.0) / 2.0, persistent=False)
        self._all_softmax = all(v == 2.0 for v in p_list)
        self._groups: list[tuple[int, int, float]] = []
        for h, v in enumerate(p_list):
            e = (v - 2.0) / 2.0
            if self._groups and self._groups[-1][2] == e:
                self._groups[-1] = (self._groups[-1][0], h + 1, e)
            else:
                self._groups.append((h, h + 1, e))

    def distance_weights(self, v: Tensor, exponent: float | None = None) -> Tensor:
        r""":math:`\mathbf{P}` ``[B, H', N, N]`` (float32, or float64 for float64 input) from
        per-head values ``v`` ``[B, H', N, d]``; one exponent for all given heads, or (default)
        the module's per-head exponents :math:`(p_h - 2)/2`."""
        return self.distance_power(self.squared_distances(v), exponent)

    def distance_power(self, d2: Tensor, exponent: float | None = None) -> Tensor:
        r""":math:`\max(\mathbf{D}, \epsilon)^{e}` of squared distances ``d2`` (:meth:`squared_distances`); one
        exponent for all heads, or (default) the module's per-head exponents."""
        d2 = d2.clamp_min(self.eps)
        if exponent is None:
            return d2.pow(self.exponent.to(d2.dtype).view(1, -1, 1, 1))
        return _fast_pow(d2, exponent)

    def squared_distances(self, v: Tensor) -> Tensor:
        r""":math:`\lVert \mathbf{v}_i - \mathbf{v}_j \rVert^2 + \epsilon` ``[B, H', N, N]`` (float32, or float64 for
        float64 input; not yet clamped against rounding) from per-head values ``v`` ``[B, H', N, d]``."""
        dt = torch.float64 if v.dtype == torch.float64 else torch.float32
        B, H, N, D = v.shape
        with torch.autocast(v.device.type, enabled=False):
            v = v.to(dt)
            if self.detach_p:
                v = v.detach()
            # Distances do not change under a shift: shifting by row 0 (a real node of every graph, so padding
            # changes nothing) leaves the Gram form's cancellation at the values' spread rather than their size.
            v3 = v.reshape(B * H, N, D)
            v3 = v3 - v3[:, :1]
            sq = v3.pow(2).sum(-1, keepdim=True)
            one = torch.ones_like(sq)
            # ||v_i||^2 + ||v_j||^2 - 2 v_i.v_j + eps as ONE batched matmul of augmented vectors
            # [v_i, |v_i|^2, 1] . [-2 v_j, 1, |v_j|^2 + eps] (no N x N broadcast-add pass);
            # clamping at eps equals clamping the rounding-negative distance at 0, then + eps.
            lhs = torch.cat([v3, sq, one], dim=-1)
            rhs = torch.cat([v3 * -2.0, one, sq + self.eps], dim=-1)
            d2 = torch.bmm(lhs, rhs.transpose(1, 2)).view(B, H, N, N)
            d2.diagonal(dim1=-2, dim2=-1).fill_(self.eps)  # ||v_i - v_i||^2 = 0 exactly; the Gram form rounds
            return d2

    def attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
               need_weights: bool) -> tuple[Tensor, Tensor | None]:
        if self._all_softmax and not self.renormalize:  # p = 2 everywhere: exactly softmax
            if not need_weights:
                p = self.dropout if self.training else 0.0
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p), None
            attn = self._softmax_weights(q, k, bias)
            return torch.matmul(F.dropout(attn, self.dropout, self.training), v), attn
        attn = self._softmax_weights(q, k, bias)
        a = F.dropout(attn, self.dropout, self.training)
        outs = []
        for start, stop, e in self._groups:  # runs of heads sharing one exponent
            a_g, v_g = a[:, start:stop], v[:, start:stop]
            if e == 0.0 and not self.renormalize:
                outs.append(torch.matmul(a_g, v_g))  # p = 2: P == 1, plain softmax head
                continue
            d2 = self.squared_distances(v_g)
            w = a_g * self.distance_power(d2, e)
            if self.renormalize:
                w = w / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
            outs.append(torch.matmul(w.to(v.dtype), v_g))
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        return out, (attn if need_weights else None)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, heads={self.heads}, p={self.p}, "
                f"eps={self.eps:g}, renormalize={self.renormalize}, dropout={self.dropout})")

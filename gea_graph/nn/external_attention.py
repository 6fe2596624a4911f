r"""Graph external attention (GEA) of GEAET."""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor
from torch.nn import Linear, Module

from gea_graph import native
from gea_graph.nn import sync_census

NORM_SCOPES = ("graph", "batch")
EDGE_HEAD_SPLITS = ("contiguous", "strided")

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: Rows (node-head pairs) per chunk of the CPU autograd node: a chunk's ``[rows, S]`` float32 working tensors
#: (1 MiB at ``S = 16``) stay in the processor's cache from one step of Eq. 3 to the next, where whole-batch
#: tensors would make each step a pass over memory (Peptides-func, 128 graphs, 8 heads: 158k rows, 10 MiB each).
CHUNK_ROWS = 16384


def _group_sum(t: Tensor, index: Tensor | None, num_groups: int) -> Tensor:
    # Sum of the rows of t per group ([num_groups, ...]); index None: one group ([1, ...]).
    if index is None:
        return t.sum(dim=0, keepdim=True)
    return t.new_zeros((num_groups, ) + tuple(t.shape[1:])).index_add_(0, index, t)


def _per_row(t: Tensor, index: Tensor | None) -> Tensor:
    # A per-group tensor taken back to the rows (index None: broadcasts as it is).
    return t if index is None else t.index_select(0, index)


#: Largest logit magnitude for which the exponentials are taken without a shift: :math:`e^a` with
#: :math:`|a| \le 62 \ln 2` lies in :math:`[2^{-62}, 2^{62}]`, a normal float32 number, and no group's sum comes
#: near overflow.
_UNSHIFTED_RANGE = 62.0 * math.log(2.0)


def _unshifted_allowed(t: Tensor) -> bool:
    # The range check reads the logits' extremes on the host: on CPU that costs nothing, on a GPU (and under
    # torch.compile) it would stall, so there the per-group shift is always taken (and while a sync census
    # counts, so that it sees the GPU's path).
    return t.device.type == "cpu" and not torch.compiler.is_compiling() and not sync_census.counting()


def _unshifted_is_exact(logits: Tensor) -> bool:
    # One pass and one host read (see _unshifted_allowed for where it is taken).
    low, high = torch.aminmax(logits)
    return -_UNSHIFTED_RANGE <= float(low) and float(high) <= _UNSHIFTED_RANGE


def _softmax_rows(logits: Tensor, index: Tensor | None, num_groups: int, inplace: bool = False) -> Tensor:
    r"""Softmax of ``logits`` ``[M, ...]`` (:math:`M > 0`) over dim 0 within each group of ``index``
    (:obj:`None`: all rows form one group); ``inplace`` overwrites ``logits`` with the result.

    A softmax is unchanged by any shift constant within a group. On CPU in eager mode, when every logit lies
    within :math:`\pm 62 \ln 2` (checked with one pass), the exponentials are taken unshifted: all are normal
    floats and no group sum can overflow or vanish, so the result is exact (two passes and a ``scatter_reduce``
    fewer). Otherwise, and always on a GPU or under :func:`torch.compile`, the per-group maximum is subtracted
    first (one ``scatter_reduce`` over the rows), as in :func:`torch_geometric.utils.softmax`, so the sums stay
    in range for any logits; that path has no host sync and no data-dependent branch, which keeps the layer
    compilable without graph breaks and never stalls a GPU."""
    out = logits if inplace else None
    if _unshifted_allowed(logits) and _unshifted_is_exact(logits):
        e = torch.exp(logits, out=out)
    else:
        if index is None:
            shift = logits.amax(dim=0, keepdim=True)
        else:
            expanded = index.view((-1, ) + (1, ) * (logits.dim() - 1)).expand_as(logits)
            shift = logits.new_zeros((num_groups, ) + tuple(logits.shape[1:])).scatter_reduce_(
                0, expanded, logits, "amax", include_self=False)
        e = torch.sub(logits, _per_row(shift, index), out=out)
        e = torch.exp(e, out=e)
    inv_total = _group_sum(e, index, num_groups).reciprocal_()
    return e.mul_(_per_row(inv_total, index))


def _l1_without_eps(p: Tensor, rho: Tensor, logits: Tensor, index: Tensor | None,
                    num_groups: int) -> Tensor:
    r"""The L1 step :math:`\alpha = p / \sum_s p_s` of Eq. 3 without epsilon, for ``p`` ``[M H, S]``
    (row sums ``rho``) the group softmax of the ``logits`` ``[M, H, S]``. Where all of a row's softmax values
    are subnormal or 0 (a node far below the column maxima of every unit), :math:`p / \sum p` loses its
    precision or is 0/0 (NaN in the authors' code); those rows take the exact value
    :math:`\alpha = \mathrm{softmax}_s(\log p_s)` computed in log space instead. The log-space value is
    computed for every row and taken where needed (``torch.where``): no host sync (which rows underflow is never
    read on the host), at the cost of a few passes over the rows."""
    alpha = p / rho
    under = rho < torch.finfo(p.dtype).tiny
    if index is None:
        shift = logits.amax(dim=0, keepdim=True)
    else:
        expanded = index.view(-1, 1, 1).expand_as(logits)
        shift = logits.new_zeros((num_groups, ) + tuple(logits.shape[1:])).scatter_reduce_(
            0, expanded, logits, "amax", include_self=False)
    total = _group_sum(torch.exp(logits - _per_row(shift, index)), index, num_groups)
    log_p = logits - _per_row(total.log_().add_(shift), index)  # log of the softmax
    return torch.where(under, torch.softmax(log_p.view(alpha.shape), dim=-1), alpha)


class _GroupSoftmax(torch.autograd.Function):
    r"""Softmax over dim 0 within each group of ``index`` (or over all rows), with a hand-written
    backward: for :math:`p = \mathrm{softmax}(a)` and incoming gradient :math:`g`,
    :math:`g_a = p \odot (g - \sum_{\text{group}} g \odot p)`. Only :math:`p` is saved."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, index: Tensor | None, num_groups: int) -> Tensor:
        if logits.size(0) == 0:
            index = None
            p = logits.clone()
        else:
            p = _softmax_rows(logits, index, num_groups)
        ctx.save_for_backward(p, index)
        ctx.num_groups = num_groups
        return p

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
        p, index = ctx.saved_tensors
        s = grad * p
        total = _per_row(_group_sum(s, index, ctx.num_groups), index)
        return s.sub_(p * total), None, None


def group_softmax(logits: Tensor, index: Tensor | None = None,
                  num_groups: int | None = None) -> Tensor:
    r"""Softmax of ``logits`` ``[M, ...]`` over dim 0 within each group of :obj:`index` (one group
    = one graph; :obj:`None` = all rows form one group), computed in at least float32 and
    returned in the input dtype.

    The result of :func:`torch_geometric.utils.softmax` (per-group max shift, ``exp``, per-group
    sum; no Python loop over graphs, no host sync, see :func:`_softmax_rows`) with a hand-written
    backward. A group's result depends only on its own rows. Without :obj:`num_groups` it is read
    from :obj:`index` (one host sync); pass it to avoid that (and under :func:`torch.compile`).
    """
    dtype = logits.dtype
    if dtype in _LOW_PRECISION:
        logits = logits.float()
    if index is not None and num_groups is None:
        num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
    return _GroupSoftmax.apply(logits, index, num_groups or 0).to(dtype)


def _chunks(num_nodes: int, heads: int, device: torch.device) -> list[tuple[int, int]]:
    # Node ranges of the chunks (whole nodes, so that a chunk's rows are its nodes' heads); one on a GPU.
    step = max(1, CHUNK_ROWS // heads) if device.type == "cpu" else max(num_nodes, 1)
    return [(lo, min(lo + step, num_nodes)) for lo in range(0, num_nodes, step)]


def _unnormalized_exponentials(x: Tensor, w_kt: Tensor, heads: int, index: Tensor | None,
                               num_groups: int, chunks: list[tuple[int, int]]
                               ) -> tuple[Tensor, Tensor] | None:
    r"""The CPU fast path of Eq. 3's softmax: :math:`e^{a}` for the logits :math:`a = \mathbf{X}\mathbf{W}_k^{\top}`
    ``[M H, S]`` and their per-group column sums ``[groups, H, S]``, a chunk of rows at a time (product, range
    check, exponentials and sums while the chunk is in the cache), or :obj:`None` where the unshifted
    exponentials are not exact (a logit beyond :math:`\pm 62 \ln 2`; see :func:`_softmax_rows`)."""
    S = w_kt.size(1)
    e = x.new_empty(x.size(0), S)
    sums = x.new_zeros((num_groups if index is not None else 1, heads, S))
    for lo, hi in chunks:
        a = torch.mm(x[lo * heads:hi * heads], w_kt, out=e[lo * heads:hi * heads])
        if not _unshifted_is_exact(a):
            return None
        torch.exp(a, out=a)
        if index is None:
            sums += a.view(-1, heads, S).sum(dim=0, keepdim=True)
        else:
            sums.index_add_(0, index[lo:hi], a.view(-1, heads, S))
    return e, sums


def _accumulate(total: Tensor | None, a: Tensor, b: Tensor) -> Tensor:
    # total + a @ b, starting from the first product (no zero-filled accumulator for a single chunk).
    return torch.mm(a, b) if total is None else total.addmm_(a, b)


class _ExternalUnits(torch.autograd.Function):
    r"""The key unit, Eq. 3 and the value unit in one autograd node. For the head-split input
    :math:`\mathbf{X}` (rows = node-head pairs):

    .. math::
        a = \mathbf{X}\mathbf{W}_k^{\top}, \quad
        p = \mathrm{softmax}_{\text{group}}(a), \quad
        \rho = \epsilon + \textstyle\sum_s p_s, \quad \alpha = p / \rho, \quad
        \mathrm{out} = \alpha\mathbf{W}_v^{\top} + \mathbf{b}_v
        = (p\,\mathbf{W}_v^{\top}) / \rho + \mathbf{b}_v .

    The key bias :math:`\mathbf{b}_k` is constant over the rows of each column, so the softmax over rows cancels
    it exactly: it is left out of the product, and its gradient :math:`\sum G_a` is exactly zero (returned as
    zeros, not computed). On CPU the rows are processed in chunks of :data:`CHUNK_ROWS` (two passes: the
    exponentials and their group sums, then the normalisation and the value unit), so that the element-wise
    steps run on data in the cache. :math:`\alpha` is not formed in the forward pass (only :math:`p` and
    :math:`\rho` are saved; with :obj:`eps=None`, :math:`\alpha` itself). Backward, for the incoming gradient
    :math:`G`, chunk by chunk with :math:`\alpha = p / \rho`: :math:`G_\alpha = G\mathbf{W}_v`, and through the
    L1 step and the softmax

    .. math::
        s = p \odot G_p = \alpha \odot (G_\alpha - \langle G_\alpha, \alpha \rangle), \qquad
        G_a = s - p \odot \textstyle\sum_{\text{group}} s,

    (also exact with :obj:`eps=None`, where :math:`\alpha = \mathrm{softmax}_s(\log p)`), then
    :math:`G_{\mathbf{W}_v} = G^{\top}\alpha`, :math:`G_{\mathbf{b}_v} = \sum G`,
    :math:`G_{\mathbf{W}_k} = G_a^{\top}\mathbf{X}`, :math:`G_{\mathbf{X}} = G_a \mathbf{W}_k`.
    With ``need_alpha`` it also returns :math:`\alpha` (not differentiable) for the attention maps, else an empty
    tensor; autograd passes no zero gradient for it (``set_materialize_grads(False)``).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, heads: int, index: Tensor | None, num_groups: int,
                w_k: Tensor, b_k: Tensor | None, w_v: Tensor, b_v: Tensor | None,
                eps: float | None, need_alpha: bool) -> tuple[Tensor, Tensor]:
        # x: [M H, d/H] with M > 0 (see _attend); outputs [M H, d/H] and [M H, S] (or empty). The rows are
        # flattened by the caller: a size expression first made inside the node breaks
        # torch.compile(dynamic=True) at the node's next call.
        S, H = w_k.size(0), heads
        chunks = _chunks(x.size(0) // H, H, x.device)
        w_kt = w_k.t()
        fast = None
        if eps is not None and _unshifted_allowed(x):
            fast = _unnormalized_exponentials(x, w_kt, H, index, num_groups, chunks)
        ones = x.new_ones(S, 1)  # row sums as matrix products: faster than sum(dim=1) on CPU
        alpha = None
        if fast is not None:
            p, inv_total = fast[0], fast[1].reciprocal_()
        else:
            # Shifted (or exact-checked) softmax of the whole batch. Without eps the logits are read again
            # where p underflows: keep them.
            logits = torch.mm(x, w_kt)
            p = _softmax_rows(logits.view(-1, H, S), index, num_groups, inplace=eps is not None).view(-1, S)
            inv_total = None
            if eps is None:  # the authors' L1 step, exact where p underflows; p is kept for backward
                alpha = _l1_without_eps(p, torch.mm(p, ones), logits.view(-1, H, S), index, num_groups)
        rho = None if alpha is not None else x.new_empty(x.size(0), 1)
        out = x.new_empty(x.size(0), w_v.size(0))
        for lo, hi in chunks:
            rows = slice(lo * H, hi * H)
            p_c = p[rows]
            if inv_total is not None:
                p_c.view(-1, H, S).mul_(_per_row(inv_total, None if index is None else index[lo:hi]))
            if alpha is not None:
                out_c = torch.mm(alpha[rows], w_v.t(), out=out[rows])
                if b_v is not None:
                    out_c.add_(b_v)
                continue
            rho_c = torch.mm(p_c, ones, out=rho[rows]).add_(eps)
            out_c = torch.mm(p_c, w_v.t(), out=out[rows])
            if b_v is None:
                out_c.div_(rho_c)
            else:
                torch.addcdiv(b_v, out_c, rho_c, out=out_c)
        ctx.save_for_backward(x, w_k, w_v, p, alpha if alpha is not None else rho, ones, index)
        ctx.num_groups = num_groups
        ctx.has_bias = (b_k is not None, b_v is not None)
        ctx.heads = heads
        ctx.saved_alpha = alpha is not None
        if not need_alpha:
            alpha = x.new_empty(0, S)
        elif alpha is None:
            alpha = p / rho
        ctx.mark_non_differentiable(alpha)
        ctx.set_materialize_grads(False)
        return out, alpha

    @staticmethod
    def backward(ctx: Any, grad: Tensor | None, _ga: Any) -> tuple[Any, ...]:
        x, w_k, w_v, p, alpha_or_rho, ones, index = ctx.saved_tensors
        if grad is None:  # only alpha was used
            return (None, ) * 10
        H, S = ctx.heads, p.size(1)
        chunks = _chunks(x.size(0) // H, H, x.device)
        grad_w_v = grad_w_k = grad_b_v = None
        s = torch.empty_like(p)
        total = p.new_zeros((ctx.num_groups if index is not None else 1, H, S))
        for lo, hi in chunks:  # s = alpha * (G_alpha - <G_alpha, alpha>) and its group sums
            rows = slice(lo * H, hi * H)
            if ctx.saved_alpha:
                q, g = alpha_or_rho[rows], grad[rows].contiguous()  # a broadcast gradient: materialised once
            else:  # alpha = p / rho, with 1 / rho taken on the gradient: G^T alpha = (G / rho)^T p
                q, g = p[rows], grad[rows] / alpha_or_rho[rows]
            grad_w_v = _accumulate(grad_w_v, g.t(), q)
            if ctx.has_bias[1]:  # G summed over the rows, chunk by chunk (a tall reduction is slow in one piece)
                part = grad[rows].sum(dim=0)
                grad_b_v = part if grad_b_v is None else grad_b_v.add_(part)
            s_c = torch.mm(g, w_v, out=s[rows]).mul_(q)  # G_alpha * alpha
            dot = torch.mm(s_c, ones)  # <G_alpha, alpha>
            s_c.addcmul_(q, dot if ctx.saved_alpha else dot.div_(alpha_or_rho[rows]), value=-1.0)
            if index is None:
                total += s_c.view(-1, H, S).sum(dim=0, keepdim=True)
            else:
                total.index_add_(0, index[lo:hi], s_c.view(-1, H, S))
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        for lo, hi in chunks:  # G_a = s - p * sum_group(s), then the key unit's gradients
            rows = slice(lo * H, hi * H)
            t = _per_row(total, None if index is None else index[lo:hi])
            ga = s[rows].view(-1, H, S).addcmul_(t, p[rows].view(-1, H, S), value=-1.0).view(-1, S)
            grad_w_k = _accumulate(grad_w_k, ga.t(), x[rows])
            if grad_x is not None:
                torch.mm(ga, w_k, out=grad_x[rows])
        grad_b_k = w_k.new_zeros(S) if ctx.has_bias[0] else None  # sum(G_a) = 0: the bias cancels
        return grad_x, None, None, None, grad_w_k, grad_b_k, grad_w_v, grad_b_v, None, None


#: Largest number of heads of the native kernel (it keeps one vector per head of a node).
NATIVE_MAX_HEADS = 16
_P, _I, _F = native.POINTER, native.INT64, native.FLOAT
_SIGNATURES = {
    "gea_forward_logits": [_I, _I, _P, _P, _P, _P, _P],
    "gea_forward_exp": [_I, _I, _P, _P, _P, _P],
    "gea_forward_out": [_I, _P, _P, _P, _P, _F, _P, _P, _P, _P, _P, _P],
    "gea_backward_s": [_I, _I, _P, _P, _P, _P, _P, _P, _P, _P],
    "gea_backward_x": [_I, _P, _P, _P, _P, _P, _P, _P, _P],
}


def external_units_kernel(head_channels: int, units: int, heads: int) -> Any:
    r"""The native float32 kernel of the external units (``gea_graph/native/kernels/external_units.c``) for
    :math:`d/H` = ``head_channels``, :math:`S` = ``units`` and :math:`H` = ``heads``, or :obj:`None` (native
    kernels off, sizes beyond :data:`gea_graph.native.MAX_WIDTH` / :data:`NATIVE_MAX_HEADS`, or no working compiler)."""
    if max(head_channels, units) > native.MAX_WIDTH or heads > NATIVE_MAX_HEADS:
        return None
    defines = {"D": head_channels, "S": units, "H": heads, "VD": native.lanes(head_channels),
               "VS": native.lanes(units)}
    return native.kernel("external_units.c", defines, _SIGNATURES, "ExternalAttention runs its PyTorch path")


def _kernel_for(x: Tensor, heads: int, units: int) -> Any:
    # The native kernel where it applies: float32 on CPU in eager mode; None elsewhere (GPU, float64, a sync
    # census, which counts what a GPU would do, no compiler).
    if x.device.type != "cpu" or x.dtype != torch.float32 or sync_census.counting():
        return None
    return external_units_kernel(x.size(1), units, heads)


class _FusedExternalUnits(torch.autograd.Function):
    r"""The math of :class:`_ExternalUnits` (same equations; :math:`\alpha` is saved instead of :math:`\rho`) in
    the native kernel ``gea_graph/native/kernels/external_units.c``: three passes over the rows forward and two
    backward, the key and value products done row by row in vector registers, so that no ``[M H, S]``
    intermediate goes through memory between separate operators. Weight gradients are summed in float32 blocks of
    32 nodes and the blocks in float64 (as accurate as PyTorch's blocked reductions, whatever the batch size). The
    kernel runs on one thread: its passes are bound by memory traffic, and two node ranges on two threads were
    slower on two cores (docs/performance.md). The softmax always subtracts each group's maximum (exact for any
    logits); exponentials below :math:`e^{-87.3}` (subnormal in float32) are 0. With :obj:`eps=None`, a row whose softmax
    values all underflow takes :math:`\alpha = \mathrm{softmax}_s(\log p)` from its logits, as in
    :func:`_l1_without_eps`."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, kernel: Any, heads: int, index: Tensor | None, num_groups: int,
                w_k: Tensor, b_k: Tensor | None, w_v: Tensor, b_v: Tensor | None,
                eps: float | None) -> tuple[Tensor, Tensor]:
        S, D = w_k.shape
        R = x.size(0)
        groups = num_groups if index is not None else 1
        vd, vs = native.lanes(D), native.lanes(S)
        x = x.contiguous()
        if index is not None:  # the kernel reads index[n] for every node and indexes with it: check as index_add_
            if index.dim() != 1 or index.numel() != R // heads:
                raise ValueError(f"the group index has shape {list(index.shape)}, expected [{R // heads}] (one "
                                 f"entry per row)")
            index = index.contiguous() if index.dtype == torch.long else index.long()
            low, high = torch.aminmax(index)
            if int(low) < 0 or int(high) >= groups:
                raise IndexError(f"group index out of range [0, {groups}): found {int(low)}..{int(high)}")
        w_kt = native.padded(w_k.detach().t(), D, vs)
        w_vt = native.padded(w_v.detach().t(), S, vd)
        b = None if b_v is None else native.padded(b_v.detach().view(1, D), 1, vd)
        p, alpha, out = x.new_empty(R, S), x.new_empty(R, S), x.new_empty(R, D)
        maxima, sums = x.new_empty(2, groups * heads, vs).unbind()
        n, ix = R // heads, None if index is None else index.data_ptr()
        kernel.gea_forward_logits(n, groups, x.data_ptr(), ix, w_kt.data_ptr(), p.data_ptr(), maxima.data_ptr())
        kernel.gea_forward_exp(n, groups, ix, maxima.data_ptr(), p.data_ptr(), sums.data_ptr())
        inv_sums = sums.reciprocal_()
        kernel.gea_forward_out(n, ix, inv_sums.data_ptr(), w_vt.data_ptr(), None if b is None else b.data_ptr(),
                               -1.0 if eps is None else eps, x.data_ptr(), w_kt.data_ptr(), maxima.data_ptr(),
                               p.data_ptr(), alpha.data_ptr(), out.data_ptr())
        ctx.save_for_backward(x, index, w_k, w_v, p, alpha)
        ctx.kernel, ctx.heads, ctx.groups = kernel, heads, groups
        ctx.has_bias = (b_k is not None, b_v is not None)
        ctx.mark_non_differentiable(alpha)
        ctx.set_materialize_grads(False)
        return out, alpha

    @staticmethod
    def backward(ctx: Any, grad: Tensor | None, _ga: Any) -> tuple[Any, ...]:
        x, index, w_k, w_v, p, alpha = ctx.saved_tensors
        if grad is None:  # only alpha was used
            return (None, ) * 10
        S, D = w_k.shape
        H, kernel = ctx.heads, ctx.kernel
        vd, vs = native.lanes(D), native.lanes(S)
        grad = grad.contiguous()  # a broadcast gradient (a sum's) is materialised once
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        w_kp = native.padded(w_k.detach(), S, vd)
        w_vp = native.padded(w_v.detach(), D, vs)
        s = x.new_empty(x.size(0), vs)
        sums = x.new_empty(ctx.groups * H, vs)
        grad_w_v, grad_w_kt = x.new_empty(2, D, vs).unbind()
        grad_b = x.new_empty(vd)
        n, ix = x.size(0) // H, None if index is None else index.data_ptr()
        kernel.gea_backward_s(n, ctx.groups, ix, w_vp.data_ptr(), alpha.data_ptr(), grad.data_ptr(),
                              s.data_ptr(), sums.data_ptr(), grad_w_v.data_ptr(), grad_b.data_ptr())
        kernel.gea_backward_x(n, x.data_ptr(), ix, w_kp.data_ptr(), p.data_ptr(), s.data_ptr(), sums.data_ptr(),
                              None if grad_x is None else grad_x.data_ptr(), grad_w_kt.data_ptr())
        grad_b_k = w_k.new_zeros(S) if ctx.has_bias[0] else None  # sum(G_a) = 0: the key bias cancels
        return (grad_x, None, None, None, None, grad_w_kt[:, :S].t(), grad_b_k, grad_w_v[:, :S],
                grad_b[:D] if ctx.has_bias[1] else None, None)


def _external_units_traced(x: Tensor, heads: int, index: Tensor | None, num_groups: int,
                           w_k: Tensor, w_v: Tensor, b_v: Tensor | None,
                           eps: float | None) -> tuple[Tensor, Tensor]:
    # The math of _ExternalUnits in plain differentiable ops, used under torch.compile: dynamo
    # fails on the second call of that autograd.Function with dynamic shapes, and the compiler
    # derives (and fuses) the backward itself. The key bias cancels in the softmax, as there.
    S = w_k.size(0)
    logits = torch.mm(x, w_k.t()).view(-1, heads, S)
    if index is None:
        shift = logits.detach().amax(dim=0, keepdim=True)
    else:
        expanded = index.view(-1, 1, 1).expand_as(logits)
        shift = logits.detach().new_zeros((num_groups, heads, S)).scatter_reduce_(
            0, expanded, logits.detach(), "amax", include_self=False)
    z = logits - _per_row(shift, index)
    e = torch.exp(z)
    total = _per_row(_group_sum(e, index, num_groups), index)
    if eps is None:  # the authors' p / sum(p) as a softmax of log p: exact where p underflows
        alpha = torch.softmax((z - total.log()).view(-1, S), dim=-1)
    else:
        p = (e / total).view(-1, S)
        alpha = p / (p.sum(dim=1, keepdim=True) + eps)
    out = torch.mm(alpha, w_v.t()) if b_v is None else torch.addmm(b_v, alpha, w_v.t())
    return out, alpha.detach()


def double_normalize(logits: Tensor, index: Tensor | None = None,
                     num_groups: int | None = None, eps: float | None = 1e-9) -> Tensor:
    r"""The double normalisation of GEAET Eq. 3 on ``logits`` of shape ``[M, H, S]``: the
    :func:`group_softmax` over the rows (nodes or edges) per head and unit column, then an L1
    normalisation over the units (last dim) with :obj:`eps` in the denominator (:obj:`None`: no
    epsilon, the plain formula of the authors' code, NaN where a row underflows; the layer's
    ``eps=None`` handles those rows exactly)."""
    p = group_softmax(logits, index, num_groups)
    total = p.sum(dim=-1, keepdim=True)
    return p / (total if eps is None else total + eps)


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
    * :math:`\epsilon` (:obj:`eps`, default :math:`10^{-9}` as in Guo et al.'s code) keeps the L1
      step finite. The paper and the GEAET code have none: :obj:`eps=None` reproduces them. The
      two differ where a node's softmax values are all tiny, which the batch-wide softmax of
      large activations produces (a node far below the column maxima of every unit): there
      :math:`\sum_s \hat{\alpha}_{i,s}` is comparable to :math:`10^{-9}` and the node's
      :math:`\alpha` shrinks towards 0 with :math:`\epsilon` but still sums to 1 without it.
      Where every value of a node underflows, the authors' float arithmetic gives 0/0 = NaN;
      :obj:`eps=None` gives the exact value of their formula there, computed in log space.
      The softmax always runs in at least float32 (a softmax over thousands of nodes underflows
      in bfloat16/float16).
    * Implementation: key unit, Eq. 3 and value unit run as one autograd node with a hand-written
      backward (float32 at least, autocast off inside). On CPU in float32 that node is a native
      kernel (``gea_graph/native/kernels/external_units.c``, compiled at first use, see
      :mod:`gea_graph.native`; ``GEA_GRAPH_NATIVE=0`` turns it off); elsewhere PyTorch ops,
      which on CPU work through the rows in cache-sized chunks; under :func:`torch.compile` the
      same math runs as plain ops and the compiler derives the backward. The key bias
      :math:`\mathbf{b}_{nk}` is constant within each softmax column and cancels (kept as a parameter, as in the paper's
      counts). The per-graph softmax subtracts each graph's maximum (see
      :func:`_softmax_rows`): no host sync, so the layer compiles with :func:`torch.compile`
      (``fullgraph=True``) when :obj:`num_graphs` is given.

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
        eps (float, optional): :math:`\epsilon` of the L1 step; :obj:`None` for none (the
            authors' code). (default: :obj:`1e-9`)
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
        # The whole node runs in at least float32 with autocast off (a softmax over thousands of
        # nodes underflows in bfloat16); the output takes the dtype the key unit would have had.
        device = h.device.type
        dtype = h.dtype
        autocast = torch.is_autocast_enabled(device)
        if autocast and dtype != torch.float64:
            dtype = torch.get_autocast_dtype(device)
        compute = torch.float32 if h.dtype in _LOW_PRECISION else h.dtype
        if index is not None and num_groups is None:
            num_groups = int(index.max()) + 1 if index.numel() > 0 else 0
        args = [h, key.weight, key.bias, value.weight, value.bias]
        args = [t.to(compute) if t is not None and t.dtype != compute else t for t in args]
        if M == 0:  # nothing to attend; the node assumes rows
            out = h.new_zeros(0, self.channels, dtype=dtype)
            return out, (out.new_zeros(0, self.heads, key.out_features) if need_attention else None)
        with torch.autocast(device, enabled=False) if autocast else nullcontext():
            x = args[0].reshape(-1, dh)
            if torch.compiler.is_compiling():
                out, alpha = _external_units_traced(x, self.heads, index, num_groups or 0,
                                                    args[1], args[3], args[4], self.eps)
            elif (kernel := _kernel_for(x, self.heads, key.out_features)) is not None:
                out, alpha = _FusedExternalUnits.apply(x, kernel, self.heads, index, num_groups or 0,
                                                       *args[1:], self.eps)
            else:
                out, alpha = _ExternalUnits.apply(x, self.heads, index, num_groups or 0,
                                                  *args[1:], self.eps, need_attention)
        out = out.to(dtype).view(M, self.heads, dh)
        attn = alpha.to(dtype).view(M, self.heads, -1) if need_attention else None
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
                f"out_proj={self.out is not None}, eps={self.eps}, "
                f"edge_head_split={self.edge_head_split!r})")

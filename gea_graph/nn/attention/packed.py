r"""Softmax attention on PyG's packed layout: every graph attends to its own nodes, with no padding.

The queries, keys and values of a batch are packed as PyG packs node features: ``[sum N_i, H, D]``, graph ``i``
owning rows ``ptr[i]:ptr[i+1]``. :func:`packed_attention` computes, per graph and head,

.. math::
    \mathbf{O}_i = \mathrm{Dropout}\big(\mathrm{softmax}(s\,\mathbf{Q}_i\mathbf{K}_i^\top)\big)\,\mathbf{V}_i

doing :math:`\sum_i N_i^2` work instead of the padded batch's :math:`B\,N_{\max}^2`. The kernel depends on the
device (:func:`packed_backend`):

* **CPU** (``"cpu_flash"``): the custom operator ``gea_graph::packed_flash_attention`` (:func:`torch.library.custom_op`)
  whose forward and backward loop ATen's CPU flash-attention kernels over the graphs, unpadded: one call per graph
  size (the graphs of one size gathered into one batched call; a size one graph has is a view, no copy; empty
  graphs are skipped). With attention dropout in training (the flash kernel has none) it runs, one batched call
  per graph size, the explicit math of the flash kernel (scores, log-sum-exp, a keep mask per size drawn by
  :func:`~gea_graph.nn.dropout.scaled_keep_mask` from a generator seeded with a seed tensor, so the backward
  redraws the same masks). The operator has a fake (meta) implementation, so it traces under :func:`torch.compile` (no
  graph break, no recompile per batch: shapes are those of ``q``) and :func:`torch.export`.
* **CUDA** (chosen by dtype; ``"njt"`` and ``"varlen"`` pass ``gea-graph selfcheck --device cuda``'s packed-vs-dense
  check on an H200; the CPU tests run the NJT and FlexAttention code paths on CPU):

  - float32 / float64, or any dtype with attention dropout: ``"njt"``, :func:`~torch.nn.functional.
    scaled_dot_product_attention` on nested jagged tensors built from ``ptr`` (``max_seqlen`` and ``min_seqlen``
    given, so no host sync); the memory-efficient kernel takes float32 and dropout.
  - bfloat16 / float16 without dropout: ``"varlen"``, :func:`torch.nn.attention.varlen.varlen_attn` (flash
    attention on ``cu_seqlens = ptr``).
  - Both take head sizes in multiples of 8 (:data:`CUDA_HEAD_MULTIPLE`); other sizes run zero-padded
    (:func:`pad_head_dim`, exact).
  - ``"flex"`` (asked for explicitly): :func:`~torch.nn.attention.flex_attention.flex_attention` with a block
    mask built straight from ``ptr`` (:func:`block_mask_from_ptr`, :meth:`BlockMask.from_kv_blocks`; never an
    :math:`N^2` ``create_block_mask``).
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from gea_graph.nn.batch_memo import LastBatchMemo
from gea_graph.nn.dropout import scaled_keep_mask

#: The backends of :func:`packed_attention` (``"auto"`` picks one with :func:`packed_backend`).
BACKENDS = ("auto", "cpu_flash", "njt", "varlen", "flex")


def packed_backend(device_type: str, dtype: torch.dtype, dropout_p: float = 0.0) -> str:
    r"""The kernel :func:`packed_attention` uses by default on ``device_type`` for ``dtype`` and attention dropout
    probability ``dropout_p`` (a pure function, so that the choice is tested on any machine): ``"cpu_flash"`` on
    CPU; on CUDA ``"varlen"`` for bfloat16/float16 without dropout, else ``"njt"``."""
    if device_type == "cpu":
        return "cpu_flash"
    if dtype in (torch.bfloat16, torch.float16) and dropout_p == 0.0:
        return "varlen"
    return "njt"


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _generator(seed: Tensor | None) -> torch.Generator | None:
    if seed is None:
        return None
    return torch.Generator().manual_seed(int(seed))


def _size_classes(ptr: Tensor, num_rows: int) -> list[tuple[int, Tensor | int, slice]]:
    # The non-empty graphs by node count: (n, first row) for a size that one graph has, (n, rows [m * n]) for a size
    # that m > 1 graphs share, which one batched kernel call then serves (the rows gathered; fewer, larger calls);
    # third, the class's stretch of the log-sum-exp buffer (see _lse_block). The graphs must cover the rows exactly
    # (the outputs are written graph by graph, never zero-filled).
    bounds = ptr.tolist()
    if (ptr.dim() != 1 or not bounds or bounds[0] != 0 or bounds[-1] != num_rows
            or any(e < s for s, e in itertools.pairwise(bounds))):
        raise ValueError(f"packed_attention: ptr must rise from 0 to the {num_rows} rows of q, k, v (PyG's "
                         f"batch.ptr), got {bounds if len(bounds) <= 8 else bounds[:4] + ['...'] + bounds[-3:]}")
    by_size: dict[int, list[int]] = {}
    for s, e in itertools.pairwise(bounds):
        if e > s:
            by_size.setdefault(e - s, []).append(s)
    out: list[tuple[int, Tensor | int, slice]] = []
    done = 0
    for n, starts in by_size.items():
        rows = slice(done, done + len(starts) * n)
        done = rows.stop
        if len(starts) == 1:
            out.append((n, starts[0], rows))
        else:
            out.append((n, (torch.tensor(starts).unsqueeze(1) + torch.arange(n)).view(-1), rows))
    return out


#: Every layer (forward and backward) of a batch is called with the batch's one ``ptr`` tensor: its size classes (and
#: their row indices) are found once a batch.
_batch_size_classes = LastBatchMemo(_size_classes)


def _graph_view(t: Tensor, n: int, start: int) -> Tensor:
    # Rows start:start + n of t [N, H, D] (any strides) as [1, H, n, D]: one as_strided call where slicing, unsqueeze
    # and transpose would be three (this runs a few times per graph size and step)
    s0, s1, s2 = t.stride()
    return t.as_strided((1, t.size(1), n, t.size(2)), (n * s0, s1, s0, s2), t.storage_offset() + start * s0)


def _rows(t: Tensor, n: int, where: Tensor | int) -> Tensor:
    # The rows of one size class as [m, H, n, D] (a view for a single graph, a gather for several)
    if isinstance(where, int):
        return _graph_view(t, n, where)
    return t.index_select(0, where).view(-1, n, *t.shape[1:]).transpose(1, 2)


def _put(dst: Tensor, n: int, where: Tensor | int, value: Tensor) -> None:
    # value [m, H, n, D] into the rows of dst [N, H, D]
    if isinstance(where, int):
        _graph_view(dst, n, where).copy_(value)
    else:
        dst.index_copy_(0, where, value.transpose(1, 2).reshape(-1, *dst.shape[1:]))


def _lse_block(lse: Tensor, H: int, n: int, rows: slice) -> Tensor:
    # The log-sum-exp of one size class, [m, H, n], a contiguous view of the flat lse [H N]: lse holds the kernels'
    # outputs class after class (the order of _size_classes), not in row order, so that backward reads them without a
    # copy. Flat, not [H, N]: inductor (torch 2.13, dynamic shapes) fixes the stride of a saved [H, N] tensor to its
    # first batch's and fails on the next (tests/nn/test_compile.py).
    return lse[rows.start * H:rows.stop * H].view(-1, H, n)


# Named anew when its log-sum-exp became flat (it was [H, N] as ``gea_graph::packed_attention``): inductor's caches and
# exported programs key on the name, and a graph built for the old layout fails on the new one.
@torch.library.custom_op("gea_graph::packed_flash_attention", mutates_args=(), device_types="cpu")
def _packed_attention_cpu(qkv: Tensor, ptr: Tensor, scale: float, dropout_p: float,
                          seed: Tensor | None) -> tuple[Tensor, Tensor]:
    # qkv [N, 3, H, D] (the fused projection's layout), so that backward returns one [N, 3, H, D] gradient: separate
    # q, k, v gradients would be stacked again by autograd (a copy of all three).
    N, _, H, D = qkv.shape
    q, k, v = qkv.unbind(1)
    out = qkv.new_empty(N, H, D)
    lse = qkv.new_empty(H * N, dtype=_lse_dtype(qkv.dtype))
    if dropout_p == 0.0:
        for n, where, rows in _batch_size_classes.get(ptr, N):  # one flash call per graph size
            o, m = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                _rows(q, n, where), _rows(k, n, where), _rows(v, n, where), scale=scale)
            _put(out, n, where, o)
            _lse_block(lse, H, n, rows).copy_(m)
        return out, lse
    gen = _generator(seed)
    # attention dropout: the flash kernel's math, one call per graph size
    for n, where, rows in _batch_size_classes.get(ptr, N):
        qg, kg, vg = _rows(q, n, where), _rows(k, n, where), _rows(v, n, where)  # [m, H, n, D]
        scores = torch.matmul(qg, kg.transpose(-1, -2)).mul_(scale)
        m = torch.logsumexp(scores, dim=-1)
        keep = scaled_keep_mask(scores.shape, dropout_p, qkv.dtype, gen)
        _put(out, n, where, torch.matmul(scores.sub_(m.unsqueeze(-1)).exp_().mul_(keep), vg))
        _lse_block(lse, H, n, rows).copy_(m)
    return out, lse


@_packed_attention_cpu.register_fake
def _(qkv, ptr, scale, dropout_p, seed):
    N, _, H, D = qkv.shape
    return qkv.new_empty(N, H, D), qkv.new_empty(H * N, dtype=_lse_dtype(qkv.dtype))


@torch.library.custom_op("gea_graph::packed_flash_attention_backward", mutates_args=(), device_types="cpu")
def _packed_attention_cpu_backward(grad: Tensor, qkv: Tensor, out: Tensor, lse: Tensor, ptr: Tensor, scale: float,
                                   dropout_p: float, seed: Tensor | None) -> Tensor:
    N, H = qkv.size(0), qkv.size(2)
    q, k, v = qkv.unbind(1)
    # Every row belongs to a non-empty graph (ptr covers 0..N), and each size class writes all its graphs' rows.
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    dq, dk, dv = dqkv.unbind(1)
    if dropout_p == 0.0:
        for n, where, rows in _batch_size_classes.get(ptr, N):
            grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                _rows(grad, n, where), _rows(q, n, where), _rows(k, n, where), _rows(v, n, where),
                _rows(out, n, where), _lse_block(lse, H, n, rows), 0.0, False, scale=scale)
            for acc, g in zip((dq, dk, dv), grads):
                _put(acc, n, where, g)
        return dqkv
    gen = _generator(seed)
    # the flash backward's math, with the forward's keep masks redrawn
    for n, where, rows in _batch_size_classes.get(ptr, N):
        qg, kg, vg, go = (_rows(t, n, where) for t in (q, k, v, grad))  # [m, H, n, D]
        probs = torch.matmul(qg, kg.transpose(-1, -2)).mul_(scale).sub_(_lse_block(lse, H, n, rows).unsqueeze(-1))
        probs = probs.exp_()
        keep = scaled_keep_mask(probs.shape, dropout_p, qkv.dtype, gen)
        _put(dv, n, where, torch.matmul((probs * keep).transpose(-1, -2), go))
        dprobs = torch.matmul(go, vg.transpose(-1, -2)).mul_(keep)
        dscores = torch._softmax_backward_data(dprobs, probs, -1, probs.dtype).mul_(scale)
        _put(dq, n, where, torch.matmul(dscores, kg))
        _put(dk, n, where, torch.matmul(dscores.transpose(-1, -2), qg))
    return dqkv


@_packed_attention_cpu_backward.register_fake
def _(grad, qkv, out, lse, ptr, scale, dropout_p, seed):
    return torch.empty_like(qkv, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    qkv, ptr, scale, dropout_p, seed = inputs
    out, lse = output
    ctx.save_for_backward(qkv, out, lse, ptr, seed)
    ctx.scale, ctx.dropout_p = scale, dropout_p
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out: Tensor, _grad_lse: Tensor | None):
    qkv, out, lse, ptr, seed = ctx.saved_tensors
    dqkv = _packed_attention_cpu_backward(grad_out.contiguous(), qkv, out, lse, ptr, ctx.scale, ctx.dropout_p, seed)
    return dqkv, None, None, None, None


_packed_attention_cpu.register_autograd(_backward, setup_context=_setup_context)


# ------------------------------------------------------------------------------------------------------------------
# CUDA backends ("njt" and "varlen" ran on an H200 through selfcheck; "flex" has not run on a GPU yet; "njt" and
# "flex" forward are exercised on CPU by the tests)

#: Head sizes the CUDA kernels take: flash attention needs a multiple of 8, the memory-efficient kernel a multiple
#: of 8 (half precision) or 4 (float32); other sizes would fall back to the math path, which syncs.
CUDA_HEAD_MULTIPLE = 8


def pad_head_dim(t: Tensor, multiple: int = CUDA_HEAD_MULTIPLE) -> Tensor:
    r"""``t [..., D]`` with zero columns appended up to a multiple of :obj:`multiple` (``t`` itself when ``D``
    already is one). Exact for attention with an explicit scale: zero columns add nothing to :math:`q \cdot k`, and
    the output's extra columns (zero) are cut off."""
    extra = -t.size(-1) % multiple
    return F.pad(t, (0, extra)) if extra else t


def _njt_attention(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, max_num_nodes: int | None,
                   min_num_nodes: int | None, scale: float, dropout_p: float) -> Tensor:
    D = v.size(-1)

    def nested(t: Tensor) -> Tensor:  # [N, H, D] -> [B, H, j, D]; cached sizes: no host sync
        return torch.nested.nested_tensor_from_jagged(pad_head_dim(t).contiguous(), ptr, max_seqlen=max_num_nodes,
                                                      min_seqlen=min_num_nodes).transpose(1, 2)

    out = F.scaled_dot_product_attention(nested(q), nested(k), nested(v), dropout_p=dropout_p, scale=scale)
    return out.transpose(1, 2).values()[..., :D]


def _varlen_attention(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, max_num_nodes: int, scale: float) -> Tensor:
    from torch.nn.attention.varlen import varlen_attn

    D = v.size(-1)
    cu = ptr.to(torch.int32)
    out = varlen_attn(*(pad_head_dim(t).contiguous() for t in (q, k, v)), cu, cu, max_num_nodes, max_num_nodes,
                      scale=scale)
    return out[..., :D]


def block_mask_from_ptr(ptr: Tensor, num_nodes: int, block_size: int = 128, batch: Tensor | None = None):
    r"""The FlexAttention :class:`~torch.nn.attention.flex_attention.BlockMask` of "attend within your graph" for a
    packed batch of ``num_nodes`` rows split by ``ptr``, built from ``ptr`` in :math:`O(N / \text{block})` work (no
    :math:`N^2` ``create_block_mask``, no host sync). Graphs are contiguous, so the key blocks a query block needs
    are one run: from the block of its first graph's first node to the block of its last graph's last node. Every
    listed block is partial (the ``mask_mod`` compares graph ids)."""
    from torch.nn.attention.flex_attention import BlockMask

    device = ptr.device
    blocks = -(-num_nodes // block_size)
    if batch is None:
        counts = ptr[1:] - ptr[:-1]
        batch = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts,
                                        output_size=num_nodes)
    rows = torch.arange(blocks, device=device) * block_size
    first_graph = batch[rows]
    last_graph = batch[(rows + block_size).clamp(max=num_nodes) - 1]
    lo = torch.div(ptr[first_graph], block_size, rounding_mode="floor")
    hi = torch.div(ptr[last_graph + 1] - 1, block_size, rounding_mode="floor")
    count = (hi - lo + 1).to(torch.int32)
    indices = (lo.unsqueeze(1) + torch.arange(blocks, device=device)).clamp(max=blocks - 1).to(torch.int32)
    graph_of = batch

    def same_graph(b, h, q_idx, kv_idx):
        return graph_of[q_idx] == graph_of[kv_idx]

    return BlockMask.from_kv_blocks(count.view(1, 1, blocks), indices.view(1, 1, blocks, blocks),
                                    BLOCK_SIZE=block_size, mask_mod=same_graph,
                                    seq_lengths=(num_nodes, num_nodes))


_COMPILED_FLEX: list = []


def _flex_attention(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, scale: float,
                    batch: Tensor | None = None) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    N = q.size(0)
    mask = block_mask_from_ptr(ptr, N, batch=batch)
    fn = flex_attention
    if q.device.type != "cpu" and not torch.compiler.is_compiling():
        # eager flex_attention materialises the scores; its fused kernel comes from compiling it (once)
        if not _COMPILED_FLEX:
            _COMPILED_FLEX.append(torch.compile(flex_attention, dynamic=True))
        fn = _COMPILED_FLEX[0]
    out = fn(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)), block_mask=mask, scale=scale)
    return out[0].transpose(0, 1)


# ------------------------------------------------------------------------------------------------------------------

def packed_attention(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor, max_num_nodes: int | None = None,
                     dropout_p: float = 0.0, scale: float | None = None, backend: str = "auto",
                     batch: Tensor | None = None, min_num_nodes: int | None = None) -> Tensor:
    r"""Per-graph softmax attention on packed rows (see the module doc), from separate queries, keys and values. The
    CPU kernel takes them stacked, ``torch.stack((q, k, v), 1)`` (a copy); a fused projection's output (e.g.
    PyG-style ``Linear(C, 3 C)`` viewed as ``[sum N_i, 3, H, D]``) goes to :func:`packed_qkv_attention` without it.

    Args:
        q, k, v (torch.Tensor): :math:`[\sum N_i, H, D]` each.
        ptr, max_num_nodes, dropout_p, scale, backend, batch, min_num_nodes: as in :func:`packed_qkv_attention`.

    Returns:
        :math:`[\sum N_i, H, D]`.
    """
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"packed_attention: q, k, v must be [sum N, H, D] alike, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    return _dispatch((q, k, v), None, ptr, max_num_nodes, dropout_p, scale, backend, batch, min_num_nodes)


def packed_qkv_attention(qkv: Tensor, ptr: Tensor, max_num_nodes: int | None = None, dropout_p: float = 0.0,
                         scale: float | None = None, backend: str = "auto", batch: Tensor | None = None,
                         min_num_nodes: int | None = None) -> Tensor:
    r"""Per-graph softmax attention on packed rows (see the module doc), from the queries, keys and values in one
    tensor (the layout of a fused ``q, k, v`` projection; the CPU kernel's gradient then comes back in that one
    tensor, not as three that autograd would stack again).

    Args:
        qkv (torch.Tensor): :math:`[\sum N_i, 3, H, D]`: queries, keys and values along dim 1 (any strides with a
            contiguous last axis).
        ptr (torch.Tensor): :math:`[B + 1]` long, graph ``i`` owns rows ``ptr[i]:ptr[i+1]`` (PyG's
            ``batch.ptr``); empty graphs are allowed.
        max_num_nodes (int, optional): The largest graph's node count (or a bound of it); the CUDA kernels need
            it, and read it from ``ptr`` (a host sync) when it is not given.
        dropout_p (float, optional): Dropout on the attention weights (pass ``0.0`` in evaluation).
        scale (float, optional): Score scale (default :math:`1/\sqrt{D}`).
        backend (str, optional): One of :data:`BACKENDS`; ``"auto"``: :func:`packed_backend`.
        batch (torch.Tensor, optional): The batch vector, if at hand (``"flex"`` only).
        min_num_nodes (int, optional): The smallest graph's node count (``"njt"``): read from ``ptr`` (a host sync)
            when not given. The fused CUDA kernels refuse a graph of no nodes (0 runs the math path), so a caller
            drops empty graphs from ``ptr`` first (:meth:`~gea_graph.nn.attention.AttentionPlan.jagged`).

    Returns:
        :math:`[\sum N_i, H, D]`.
    """
    if qkv.dim() != 4 or qkv.size(1) != 3:
        raise ValueError(f"packed_qkv_attention: qkv must be [sum N, 3, H, D], got {tuple(qkv.shape)}")
    return _dispatch(qkv.unbind(1), qkv, ptr, max_num_nodes, dropout_p, scale, backend, batch, min_num_nodes)


def _dispatch(qkv_parts: tuple[Tensor, ...], qkv: Tensor | None, ptr: Tensor, max_num_nodes: int | None,
              dropout_p: float, scale: float | None, backend: str, batch: Tensor | None,
              min_num_nodes: int | None) -> Tensor:
    # The backend choice of both public forms. The CPU operator takes one [N, 3, H, D] tensor (stacked here only when
    # the caller gave three); the CUDA kernels take q, k, v as they are.
    q, k, v = qkv_parts
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else float(scale)
    if backend == "auto":
        backend = packed_backend(q.device.type, q.dtype, dropout_p)
    if backend not in BACKENDS:
        raise ValueError(f"packed_attention: unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "cpu_flash":
        seed = torch.randint(0, 2 ** 62, (), dtype=torch.long) if dropout_p > 0.0 else None
        qkv = torch.stack(qkv_parts, dim=1) if qkv is None else qkv
        return _packed_attention_cpu(qkv, ptr, scale, float(dropout_p), seed)[0]
    if q.size(0) == 0:  # no rows, no attention (the CUDA kernels take no empty batch)
        return v * 0.0
    if max_num_nodes is None and backend != "flex":
        max_num_nodes = int((ptr[1:] - ptr[:-1]).max()) if ptr.numel() > 1 else 0
    if backend == "njt":
        return _njt_attention(q, k, v, ptr, max_num_nodes, min_num_nodes, scale, dropout_p)
    if dropout_p > 0.0:
        raise ValueError(f"packed_attention: backend {backend!r} has no attention dropout; use 'njt'")
    if backend == "varlen":
        return _varlen_attention(q, k, v, ptr, max_num_nodes, scale)
    return _flex_attention(q, k, v, ptr, scale, batch)

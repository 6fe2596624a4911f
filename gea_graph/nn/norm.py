r"""Batch normalisation over the global batch of a distributed run, and over the real rows of a padded batch."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import Module, SyncBatchNorm
from torch.nn.modules.batchnorm import _BatchNorm


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


#: The row masks of the padded batch being run (:func:`padding_rows`), by row count: ``{N: [N] bool, ...}``.
_PADDING: dict[int, Tensor] = {}
#: The row weights of each mask of :data:`_PADDING` (:class:`_Rows`), made at its first use in the batch.
_ROWS: dict[tuple[int, int], _Rows] = {}
#: The batch statistics ``(norm, mean, var, rows)`` of the norms run in the padded batch, for their running
#: statistics (:func:`update_running_statistics`).
_PENDING: list[tuple[DistributedBatchNorm, Tensor, Tensor, _Rows]] = []


@contextmanager
def padding_rows(*masks: Tensor) -> Iterator[None]:
    r"""Within it, every :class:`DistributedBatchNorm` whose input has as many rows as one of :obj:`masks` (``[R]``
    bool, ``True`` on real rows) takes its training statistics over the real rows only (and GEA's batch-wide softmax
    its sums, :func:`real_row_mask`): what a fixed-size batch
    (:mod:`gea_graph.train.fixed_size`) needs so that its padding changes no result. The masks are told apart by
    their lengths (a padded batch's nodes, edges and graphs differ in number), so the layers need no mask argument.
    The padding rows' outputs are finite and pass no gradient back: nothing of the padding reaches the real rows.
    The running statistics of the norms are updated together when the context ends (or earlier, by
    :func:`update_running_statistics`), as each norm would have updated its own.
    """
    sizes = [m.size(0) for m in masks]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"padding_rows: the masks must differ in length (got {sizes})")
    previous, rows, pending = dict(_PADDING), dict(_ROWS), list(_PENDING)
    _PADDING.clear()
    _PADDING.update({m.size(0): m for m in masks})
    _ROWS.clear()
    _PENDING.clear()
    try:
        yield
        update_running_statistics()
    finally:
        _PADDING.clear()
        _PADDING.update(previous)
        _ROWS.clear()
        _ROWS.update(rows)
        _PENDING[:] = pending


def real_row_mask(rows: int) -> Tensor | None:
    r"""The mask ``[rows]`` (``True`` on real rows) of the padded batch being run (:func:`padding_rows`) for a
    tensor of :obj:`rows` rows, else :obj:`None`: for a computation over all the rows of a batch that must leave its
    padding out (GEA's batch-wide softmax)."""
    return _PADDING.get(rows) if _PADDING else None


def update_running_statistics() -> None:
    r"""Updates the running statistics of the norms run in the padded batch so far (:func:`padding_rows`), in
    order: with ``foreach`` operators per mask and momentum, a few operators for all the norms of a step."""
    rounds: list[tuple[set[int], dict[tuple[int, float | None], list]]] = []  # a norm run k times: k rounds
    for entry in _PENDING:
        seen, groups = next((r for r in rounds if id(entry[0]) not in r[0]), None) or (set(), {})
        if not seen:
            rounds.append((seen, groups))
        seen.add(id(entry[0]))
        groups.setdefault((id(entry[3]), entry[0].momentum), []).append(entry)
    _PENDING.clear()
    with torch.no_grad():
        for _, groups in rounds:
            for entries in groups.values():
                norms, rows = [e[0] for e in entries], entries[0][3]
                counts = [n.num_batches_tracked for n in norms]
                torch._foreach_add_(counts, [rows.learn_count] * len(counts))  # a tensor scalar would be read
                momentum = norms[0].momentum
                factors = ([rows.factor(momentum, n.num_features) for n in norms] if momentum is not None else
                           [(rows.learn / c.clamp(min=1)).expand(n.num_features) for n, c in zip(norms, counts)])
                torch._foreach_lerp_([n.running_mean for n in norms],
                                     [e[1].to(n.running_mean.dtype) for n, e in zip(norms, entries)], factors)
                unbiased = torch._foreach_mul([e[2] for e in entries], rows.unbiased)
                torch._foreach_lerp_([n.running_var for n in norms],
                                     [v.to(n.running_var.dtype) for n, v in zip(norms, unbiased)], factors)


class _Rows:
    r"""The rows a batch norm takes its statistics over, as tensors shared by every norm of a batch: ``padding``
    (``[R, 1]`` bool, the rows left out), ``weight`` (``[1, R]``: :math:`1/n` on the :math:`n` real rows of all
    processes, 0 elsewhere, so that ``weight @ x`` is their mean), ``single`` (:math:`n \le 1` in one process: the
    running statistics stand in for the batch's, as :class:`torch_geometric.nn.norm.BatchNorm` does unpadded),
    ``learn`` (0 then, else 1: the running statistics' update), ``learn_weight`` (``weight * learn``: the batch's
    share of the statistics; ``mean_weight`` as a column, the weight of the mean terms of the gradient) and
    ``unbiased`` (:math:`n / (n - 1)`). In a distributed run ``single`` is false (every process gathers)."""

    def __init__(self, real: Tensor, spans: bool) -> None:
        ones = real.to(torch.float32)
        count = ones.sum().view(1)
        if spans:
            dist.all_reduce(count)
        self.padding = ~real.view(-1, 1)
        self.weight = (ones / count.clamp(min=1)).view(1, -1)
        self.single = (count <= 1).to(torch.float32) if not spans else torch.zeros_like(count)
        self.learn = 1.0 - self.single
        self.learn_count = self.learn.long().view(())
        self.learn_weight = self.weight * self.learn
        self.mean_weight = self.learn_weight.view(-1, 1)
        self.unbiased = (count / (count - 1).clamp(min=1)).view(())
        self.factors: dict[tuple[float, int], Tensor] = {}

    def factor(self, momentum: float, channels: int) -> Tensor:
        r"""The running statistics' update factor ``learn * momentum`` for ``channels`` channels (the shape of the
        statistics, so that ``foreach`` operators take their fast path), once per batch."""
        if (momentum, channels) not in self.factors:
            self.factors[momentum, channels] = (self.learn * momentum).expand(channels).contiguous()
        return self.factors[momentum, channels]


def _rows(rows: int, per_row: int, spans: bool, device: torch.device) -> _Rows:
    # The real rows of the padded batch's mask of this length (worked out once per batch), else all rows.
    mask = real_row_mask(rows)
    if mask is None:
        return _Rows(torch.ones(rows * per_row, dtype=torch.bool, device=device), spans)
    key = (rows, per_row)
    if key not in _ROWS:
        _ROWS[key] = _Rows(mask.repeat_interleave(per_row) if per_row > 1 else mask, spans)
    return _ROWS[key]


def _all_reduce(tensor: Tensor, spans: bool) -> Tensor:
    # the sum over processes, in place (the autograd function around it gives the gradient its own all-reduce)
    if spans:
        dist.all_reduce(tensor)
    return tensor


class _RowBatchNorm(torch.autograd.Function):
    r"""Batch normalisation of ``x`` (``[R, C]``) with the statistics of the rows that ``rows`` weighs, summed
    over processes when ``spans``; returns ``(out, mean, var)``. The backward is the closed form of batch norm's
    gradient restricted to those rows (:math:`\mathbf{g}` the output's gradient, :math:`\hat{\mathbf{x}}` the
    normalised input, sums over the rows),

    .. math::
        \frac{\partial L}{\partial \mathbf{x}_i} = \frac{\boldsymbol{\gamma}}
        {\sqrt{\boldsymbol{\sigma}^2 + \epsilon}} \odot \Big(\mathbf{g}_i - \frac{1}{n} \sum_j \mathbf{g}_j
        - \hat{\mathbf{x}}_i \odot \frac{1}{n} \sum_j \mathbf{g}_j \odot \hat{\mathbf{x}}_j\Big),

    0 on the other rows, and without the mean terms where the running statistics stand in: a few operators, as
    :func:`torch.nn.functional.batch_norm` has, where autograd through the masked statistics makes dozens."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                running_var: Tensor | None, rows: _Rows, spans: bool, eps: float) -> tuple[Tensor, Tensor, Tensor]:
        x = x.masked_fill(rows.padding, 0.0)  # padding rows may hold anything
        if running_mean is None:
            mean = _all_reduce(rows.weight @ x, spans)
            centred = x - mean
            var = _all_reduce(rows.weight @ centred.square(), spans)
        else:  # the running statistics where they stand in (learn_weight is 0 then), else the batch's
            mean = _all_reduce(torch.addmm(running_mean * rows.single, rows.learn_weight, x), spans)
            centred = x - mean
            var = _all_reduce(torch.addmm(running_var * rows.single, rows.learn_weight, centred.square()), spans)
        rstd = torch.rsqrt(var + eps)
        scale = rstd if weight is None else rstd * weight
        out = centred * scale if bias is None else torch.addcmul(bias, centred, scale)
        ctx.save_for_backward(centred, rstd, scale)
        ctx.rows, ctx.spans, ctx.affine = rows, spans, weight is not None
        ctx.mark_non_differentiable(mean, var)
        ctx.set_materialize_grads(False)  # the statistics get no gradient: no zeros for them
        return out, mean, var

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor, _mean: Tensor, _var: Tensor) -> tuple[Tensor | None, ...]:
        centred, rstd, scale = ctx.saved_tensors
        rows: _Rows = ctx.rows
        grad = grad.masked_fill(rows.padding, 0.0)
        normed = centred * rstd
        grad_bias, grad_weight = grad.sum(0), (grad * normed).sum(0)  # this process's rows
        if ctx.spans:
            sums = _all_reduce(torch.cat([grad_bias, grad_weight]), True)
            mean_terms = torch.addcmul(sums[:grad_bias.numel()], normed, sums[grad_bias.numel():])
        else:
            mean_terms = torch.addcmul(grad_bias, normed, grad_weight)
        grad_x = torch.addcmul(grad, rows.mean_weight, mean_terms, value=-1.0) * scale
        if not ctx.affine:
            grad_weight = grad_bias = None
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class DistributedBatchNorm(_BatchNorm):
    r"""Batch normalisation whose training statistics span the mini-batches of every process of a distributed run:
    with :math:`W` processes holding rows :math:`\mathbf{x}^{(1)}, \dots, \mathbf{x}^{(W)}` (:math:`n_r` each,
    :math:`n = \sum_r n_r`),

    .. math::
        \boldsymbol{\mu} = \frac{1}{n} \sum_{r, i} \mathbf{x}^{(r)}_i, \qquad
        \boldsymbol{\sigma}^2 = \frac{1}{n} \sum_{r, i} (\mathbf{x}^{(r)}_i - \boldsymbol{\mu})^2, \qquad
        \mathbf{y}^{(r)}_i = \boldsymbol{\gamma} \odot \frac{\mathbf{x}^{(r)}_i - \boldsymbol{\mu}}
        {\sqrt{\boldsymbol{\sigma}^2 + \epsilon}} + \boldsymbol{\beta},

    i.e. what :class:`~torch.nn.BatchNorm1d` computes in one process on the global batch (the running variance takes
    the unbiased :math:`\frac{n}{n - 1} \boldsymbol{\sigma}^2`). The sums are two all-reduces (the mean first, then
    the centred squares, which is numerically stable), and the backward all-reduces the sums of its mean terms, so
    the gradients are those of the global batch too. Unlike
    :class:`~torch.nn.SyncBatchNorm`, which DDP accepts on GPU modules only, it runs on any device and backend (gloo
    on CPUs, NCCL on GPUs), so a CPU test runs the code a GPU run uses. In evaluation, or without a process group of
    more than one process, it is plain batch normalisation.

    Every process must call it at every training step (DDP's processes step together), also with few rows of its
    own. Build it with :meth:`convert`, which keeps the parameters and buffers (the state dict does not change).

    Shapes:
        - **input:** :math:`(N, C)` or :math:`(N, C, *)`
        - **output:** the input's shape
    """

    #: The class :meth:`revert` turns a module back into (set by :meth:`convert`).
    replaced: type[_BatchNorm] = torch.nn.BatchNorm1d

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: Tensor) -> Tensor:
        r"""Normalises ``input`` with the (global, real-row) batch's statistics in training, else the running ones."""
        self._check_input_dim(input)
        masked = self.training and input.size(0) in _PADDING
        spans = self.training and _world_size() > 1
        if not masked and not spans:
            return super().forward(input)
        channels = input.size(1)
        x = input.float()  # statistics in float32 also under autocast
        if x.dim() > 2:  # (N, C, *): rows of C values
            x = x.movedim(1, -1).reshape(-1, channels)
        rows = _rows(input.size(0), x.size(0) // input.size(0), spans, input.device)
        out, mean, var = _RowBatchNorm.apply(x, self.weight, self.bias, self.running_mean, self.running_var, rows,
                                             spans, self.eps)
        if self.track_running_stats and self.running_mean is not None:
            _PENDING.append((self, mean.view(-1), var.view(-1), rows))
            if not masked:  # no padded batch to end: now
                update_running_statistics()
        if input.dim() > 2:
            out = out.view(input.shape[:1] + input.shape[2:] + input.shape[1:2]).movedim(-1, 1)
        return out.to(input.dtype)

    @classmethod
    def convert(cls, module: Module) -> Module:
        r"""``module`` with every :class:`~torch.nn.modules.batchnorm._BatchNorm` (but
        :class:`~torch.nn.SyncBatchNorm`) replaced by a :class:`DistributedBatchNorm` holding the same parameters
        and buffers; :meth:`revert` undoes it."""
        if isinstance(module, _BatchNorm) and not isinstance(module, (cls, SyncBatchNorm)):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
            _share_state(module, out)
            out.replaced = type(module)
            return out
        for name, child in module.named_children():
            module.add_module(name, cls.convert(child))
        return module

    @classmethod
    def revert(cls, module: Module) -> Module:
        r"""``module`` with every :class:`DistributedBatchNorm` turned back into the class it replaced."""
        if isinstance(module, cls):
            out = module.replaced(module.num_features, module.eps, module.momentum, module.affine,
                                  module.track_running_stats)
            _share_state(module, out)
            return out
        for name, child in module.named_children():
            module.add_module(name, cls.revert(child))
        return module


def _share_state(source: _BatchNorm, target: _BatchNorm) -> None:
    for name in ("weight", "bias"):
        if getattr(source, name, None) is not None:
            setattr(target, name, getattr(source, name))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        if getattr(source, name, None) is not None:
            target.register_buffer(name, getattr(source, name))
    target.train(source.training)


def spans_processes(norm: Module) -> bool:
    r"""Whether ``norm`` gathers statistics across processes (:class:`DistributedBatchNorm`,
    :class:`~torch.nn.SyncBatchNorm`): every process must then call it at every training step."""
    return isinstance(norm, (DistributedBatchNorm, SyncBatchNorm))

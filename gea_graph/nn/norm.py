r"""Batch normalisation over the global batch of a distributed run, and over the real rows of a padded batch."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn import Module, SyncBatchNorm
from torch.nn.modules.batchnorm import _BatchNorm


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


#: The row masks of the padded batch being run (:func:`padding_rows`), by row count: ``{N: [N] bool, ...}``.
_PADDING: dict[int, Tensor] = {}


@contextmanager
def padding_rows(*masks: Tensor) -> Iterator[None]:
    r"""Within it, every :class:`DistributedBatchNorm` whose input has as many rows as one of :obj:`masks` (``[R]``
    bool, ``True`` on real rows) takes its training statistics over the real rows only: what a fixed-size batch
    (:mod:`gea_graph.train.fixed_size`) needs so that its padding changes no result. The masks are told apart by
    their lengths (a padded batch's nodes, edges and graphs differ in number), so the layers need no mask argument.
    """
    sizes = [m.size(0) for m in masks]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"padding_rows: the masks must differ in length (got {sizes})")
    previous = dict(_PADDING)
    _PADDING.clear()
    _PADDING.update({m.size(0): m for m in masks})
    try:
        yield
    finally:
        _PADDING.clear()
        _PADDING.update(previous)


class _AllReduceSum(torch.autograd.Function):
    r"""The sum over processes of a tensor, differentiable: the gradient of a sum is the sum of the gradients."""

    @staticmethod
    def forward(ctx, tensor: Tensor) -> Tensor:
        out = tensor.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        out = grad.clone()
        dist.all_reduce(out)
        return out


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
    the unbiased :math:`\frac{n}{n - 1} \boldsymbol{\sigma}^2`). The sums are two differentiable all-reduces
    (the mean first, then the centred squares, which is
    numerically stable), so the gradients are those of the global batch too. Unlike
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
        mask = _PADDING.get(input.size(0)) if self.training else None
        spans = self.training and _world_size() > 1
        if mask is None and not spans:
            return super().forward(input)
        x = input.float()  # statistics in float32 also under autocast
        channels = x.size(1)
        dims = [0, *range(2, x.dim())]
        shape = (1, channels) + (1,) * (x.dim() - 2)
        per_row = x[0].numel() / channels  # values per channel in a row
        if mask is not None:  # padding rows are left out of every sum (torch.where: their values may be anything)
            real = mask.view((-1,) + (1,) * (x.dim() - 1))
            x = torch.where(real, x, 0.0)
            count = (mask.sum() * per_row).to(x.dtype).view(1)
        else:
            real = None
            count = x.new_full((1,), x.size(0) * per_row)
        sums = torch.cat([x.sum(dims), count])
        if spans:
            sums = _AllReduceSum.apply(sums)
        total = sums[channels]
        mean = sums[:channels] / total.clamp(min=1)
        centred = x - mean.view(shape)
        if real is not None:
            centred = torch.where(real, centred, 0.0)
        squares = (centred * centred).sum(dims)
        var = (_AllReduceSum.apply(squares) if spans else squares) / total.clamp(min=1)
        # A batch of one real row in one process: its running statistics, as the layers do unpadded (a padded batch
        # has more rows, so the layers cannot tell)
        running = None
        if not spans and self.running_mean is not None:
            running = total <= per_row
            mean = torch.where(running, self.running_mean.float(), mean)
            var = torch.where(running, self.running_var.float(), var)
            centred = x - mean.view(shape)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                learn = (~running).to(mean.dtype) if running is not None else mean.new_ones(())
                self.num_batches_tracked.add_(learn.long())
                if self.momentum is None:
                    factor = learn / self.num_batches_tracked.clamp(min=1)
                else:
                    factor = learn * self.momentum
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor.to(self.running_mean.dtype))
                unbiased = var * total / (total - 1).clamp(min=1)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor.to(self.running_var.dtype))
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
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

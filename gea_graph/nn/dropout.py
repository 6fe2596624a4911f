r"""Dropout that is fast on CPU (a native Philox kernel in float32), and dropout fused with the residual sum that
follows it."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Module

from gea_graph import native
from gea_graph.nn import sync_census

#: Lanes of random bits per element: one int32 lane, so a drop probability is resolved to :math:`2^{-32}`.
_LANE_RANGE = 2**32
_FAST_DTYPES = (torch.float32, torch.float64)


def _fast(x: Tensor, p: float) -> bool:
    # The CPU kernel of F.dropout draws one Bernoulli number at a time (about 12 ns an element here, ten times
    # the cost of the multiplication); on a GPU, under torch.compile (which fuses its own random numbers) and
    # for other dtypes, F.dropout is used as it is.
    return (x.device.type == "cpu" and x.dtype in _FAST_DTYPES and 0.0 < p < 1.0
            and not torch.compiler.is_compiling())


def scaled_keep_mask(shape: tuple[int, ...], p: float, dtype: torch.dtype = torch.float32,
                     generator: torch.Generator | None = None) -> Tensor:
    r"""A CPU dropout mask of :obj:`shape`: each element is :math:`1 / (1 - p)` (kept) or 0 (dropped, with
    probability :obj:`p` rounded to a multiple of :math:`2^{-32}`), from 32 random bits per element drawn in bulk
    from :obj:`generator` (default: torch's default generator)."""
    # 64 random bits give two int32 lanes, uniform on [-2^31, 2^31); a lane at or above the threshold keeps its
    # element, so P(drop) = round(p 2^32) / 2^32.
    n = math.prod(shape)
    bits = torch.empty((n + 1) // 2, dtype=torch.int64).random_(-(2**63), None, generator=generator)
    lanes = bits.view(torch.int32)[:n].view(shape)
    threshold = round(p * _LANE_RANGE) - _LANE_RANGE // 2
    mask = torch.ge(lanes, threshold, out=torch.empty(shape, dtype=dtype))
    return mask.mul_(1.0 / (1.0 - p))


_SIGNATURES = {
    "dropout_forward": [native.INT64, native.POINTER, native.POINTER, native.POINTER, native.UINT32, native.UINT32,
                        native.UINT32, native.FLOAT],
    "dropout_backward": [native.INT64, native.POINTER, native.POINTER, native.UINT32, native.UINT32, native.UINT32,
                         native.FLOAT],
}


def philox_kernel() -> Any:
    r"""The native float32 dropout kernel (``gea_graph/native/kernels/dropout.c``: Philox4x32-10 keep masks), or
    :obj:`None` (native kernels off, or no working compiler)."""
    return native.kernel("dropout.c", {}, _SIGNATURES, "dropout draws its masks with torch's generator")


class _PhiloxDropout(torch.autograd.Function):
    r"""``residual + dropout(x)`` (no :obj:`residual`: ``dropout(x)``) in the native kernel, one pass over the
    elements: the keep mask of element :math:`i` comes from the Philox4x32-10 block of counter :math:`i` (in the
    kernel's chunk order) under a 64-bit key drawn from torch's default generator, and the backward draws it again
    from the same key (no mask is stored)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, residual: Tensor | None, p: float, kernel: Any) -> Tensor:
        x = x.contiguous()
        residual = None if residual is None else residual.contiguous()
        # 64 random bits from torch's default generator: torch.manual_seed repeats the masks
        key = int(torch.empty((), dtype=torch.int64).random_(-(2**63), None)) % 2**64
        ctx.args = (key % 2**32, key >> 32, min(round(p * _LANE_RANGE), _LANE_RANGE - 1), 1.0 / (1.0 - p))
        out = torch.empty_like(x)
        kernel.dropout_forward(x.numel(), x.data_ptr(), None if residual is None else residual.data_ptr(),
                               out.data_ptr(), *ctx.args)
        ctx.kernel, ctx.has_residual = kernel, residual is not None
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad = grad.contiguous()  # a broadcast gradient (a sum's) is materialised once
        grad_x = torch.empty_like(grad)
        ctx.kernel.dropout_backward(grad.numel(), grad.data_ptr(), grad_x.data_ptr(), *ctx.args)
        return grad_x, grad if ctx.has_residual else None, None, None


def _philox(x: Tensor) -> Any:
    # The native kernel for float32; float64 and a sync census (which counts what a GPU would do: the key is read on
    # the host) keep the bulk bits of scaled_keep_mask.
    return philox_kernel() if x.dtype == torch.float32 and not sync_census.counting() else None


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:
        mask = scaled_keep_mask(x.shape, p, x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (mask, ) = ctx.saved_tensors
        return grad * mask, None


class _DropoutAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, residual: Tensor, p: float) -> Tensor:
        mask = scaled_keep_mask(x.shape, p, x.dtype)
        ctx.save_for_backward(mask)
        return torch.addcmul(residual, x, mask)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        (mask, ) = ctx.saved_tensors
        return grad * mask, grad, None


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    r"""Dropout (`Srivastava et al., 2014 <https://jmlr.org/papers/v15/srivastava14a.html>`_), as
    :func:`torch.nn.functional.dropout`: in training every element of :obj:`x` is zeroed independently with
    probability :obj:`p` and the others are scaled by :math:`1 / (1 - p)`; otherwise :obj:`x` is returned.

    On CPU in eager mode the drop probability is :obj:`p` rounded to a multiple of :math:`2^{-32}` and the masks are
    repeatable with :func:`torch.manual_seed`. In float32 a native kernel (:func:`philox_kernel`) draws each
    element's 32 bits from the counter-based generator Philox4x32-10 under a 64-bit key taken from torch's default
    generator, in one pass with the multiplication, and the backward draws the same mask again (none is stored); in
    float64 (or without a compiler) the mask comes from 32 random bits per element drawn in bulk from torch's
    default generator. Both are several times faster than :func:`torch.nn.functional.dropout`, whose CPU kernel
    draws one Bernoulli number at a time. Elsewhere (a GPU, another dtype, :func:`torch.compile`) it is
    :func:`torch.nn.functional.dropout`.

    Shapes: any, the output has the shape of :obj:`x`.
    """
    if not training or p == 0.0:
        return x
    if not _fast(x, p):
        return F.dropout(x, p, True)
    if (kernel := _philox(x)) is not None:
        return _PhiloxDropout.apply(x, None, p, kernel)
    return _Dropout.apply(x, p)


def dropout_add(x: Tensor, residual: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    r"""``residual + dropout(x, p, training)`` (see :func:`dropout`) in one pass on CPU: the mask multiplies
    :obj:`x` inside the sum (:func:`torch.addcmul`), and the residual's gradient passes through unchanged. Both
    tensors have the same shape."""
    if x.shape != residual.shape:
        raise ValueError(f"dropout_add: x {list(x.shape)} and residual {list(residual.shape)} differ in shape")
    if not training or p == 0.0:
        return residual + x
    if not _fast(x, p) or residual.dtype != x.dtype or residual.device != x.device:
        return residual + F.dropout(x, p, True)
    if (kernel := _philox(x)) is not None:
        return _PhiloxDropout.apply(x, residual, p, kernel)
    return _DropoutAdd.apply(x, residual, p)


class Dropout(Module):
    r"""A drop-in for :class:`torch.nn.Dropout` that uses :func:`dropout` (fast on CPU).

    Args:
        p (float, optional): Probability of an element to be zeroed. (default: :obj:`0.5`)
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        r"""Runs the forward pass of the module."""
        return dropout(x, self.p, self.training)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p})"

r"""A census of every transfer between the host and the device in a whole training step, both directions.

On a GPU a step that moves data either way cannot be one CUDA graph and cannot run ahead of the device:

* **device to host**: a value or an output size read on the host (``.item()``, ``nonzero``, boolean-mask indexing,
  ``.cpu()``, ...: the operations of :mod:`gea_graph.nn.sync_census`, whose knowledge this module reuses);
* **host to device**: a tensor made from host data inside the step (``torch.tensor(...)``, ``torch.as_tensor`` of a
  Python number: ``aten.lift_fresh``, e.g. torchmetrics turning an ``int`` weight into a tensor) and explicit copies
  from CPU tensors to the device (``aten._to_copy`` / ``aten.copy_`` across devices: seen on a GPU only).

:func:`step_transfers` counts them over forward, loss, backward, gradient clipping and the optimiser step (and the
schedule's update), on any device: on a CPU, made-from-host tensors are what would cross on a GPU. Python numbers
passed to an operator (``x + 1``, ``torch.full``) travel as kernel arguments, not copies, and are not counted.
"""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from gea_graph.nn.sync_census import SYNC_METHODS, output_read

#: ATen operations that make a tensor from host data (a host-to-device copy when the step runs on a GPU).
FROM_HOST_OPS: frozenset[str] = frozenset({"aten.lift_fresh.default", "aten.lift_fresh_copy.default"})


@dataclass(frozen=True)
class Transfer:
    r"""One transfer: ``direction`` (``"device->host"`` or ``"host->device"``), the operation and where it was issued
    (the innermost ``gea_graph`` frame, else the innermost frame outside torch)."""

    direction: str
    op: str
    where: str


def _site() -> str:
    frame = sys._getframe(2)
    outside = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and "/torch/" not in name and not name.endswith("sync_census.py"):
            outside = outside or f"{name.split('site-packages/')[-1]}:{frame.f_lineno}"
            if "gea_graph" in name:
                return f"{name.split('gea_graph/')[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return outside or "?"


def _device(value: Any) -> str | None:
    return torch.device(value).type if value is not None else None


def _crosses(src: Any, target: str | None) -> str | None:
    # the direction of a copy of tensor `src` to device type `target`, or None when it stays
    if not isinstance(src, torch.Tensor) or target is None or src.device.type == "meta" or target == "meta":
        return None
    if src.device.type == "cpu" and target != "cpu":
        return "host->device"
    if src.device.type != "cpu" and target == "cpu":
        return "device->host"
    return None


def _copy_direction(name: str, args: tuple, kwargs: dict) -> str | None:
    if name.startswith("aten._to_copy"):
        return _crosses(args[0], _device(kwargs.get("device")))
    if name.startswith("aten.copy_"):
        return _crosses(args[1], args[0].device.type)
    return None


class _Dispatch(TorchDispatchMode):
    def __init__(self, census: TransferCensus) -> None:
        super().__init__()
        self.census = census

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        census, name = self.census, str(func)
        if not census._inside:
            if read := output_read(name, args, kwargs):
                census._record("device->host", read)
            elif name in FROM_HOST_OPS:
                census._record("host->device", name)
            elif way := _copy_direction(name, args, kwargs):
                census._record(way, name)
        if func.namespace not in ("aten", "prim", "prims"):  # a custom operator's kernel is its own business
            census._inside += 1
            try:
                return func(*args, **kwargs)
            finally:
                census._inside -= 1
        return func(*args, **kwargs)


class _Function(TorchFunctionMode):
    def __init__(self, census: TransferCensus) -> None:
        super().__init__()
        self.census = census

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if (not self.census._inside and name in SYNC_METHODS and args and isinstance(args[0], torch.Tensor)
                and getattr(torch.Tensor, name, None) is func):
            self.census._record("device->host", f"Tensor.{name}")
        return func(*args, **(kwargs or {}))


class TransferCensus:
    r"""Counts host-device transfers, both directions, while active (a context manager; counts accumulate).

    Attributes:
        events (list[Transfer]): every transfer, in order.
    """

    def __init__(self) -> None:
        self.events: list[Transfer] = []
        self._inside = 0
        self._modes: tuple[_Function, _Dispatch] | None = None

    def _record(self, direction: str, op: str) -> None:
        self.events.append(Transfer(direction, op, _site()))

    @property
    def count(self) -> int:
        r"""Transfers recorded, both directions."""
        return len(self.events)

    def by_direction(self) -> dict[str, int]:
        r"""``{"device->host": n, "host->device": m}``."""
        counts = Counter(e.direction for e in self.events)
        return {way: counts.get(way, 0) for way in ("device->host", "host->device")}

    def report(self) -> str:
        r"""One line per ``(direction, op, where)`` with its count, most frequent first."""
        if not self.events:
            return "no host-device transfers"
        sites = Counter((e.direction, e.op, e.where) for e in self.events)
        return "\n".join(f"{n:4d} x {d} {op} at {where}" for (d, op, where), n in sites.most_common())

    def __enter__(self) -> Self:
        if self._modes is not None:
            raise RuntimeError("TransferCensus is already active")
        self._modes = (_Function(self), _Dispatch(self))
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._modes is not None
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = None


def step_transfers(loss_of: Callable[[], torch.Tensor], parameters: list[torch.nn.Parameter],
                   optimizer: torch.optim.Optimizer, clip: float | None = None,
                   scheduler: Any = None) -> TransferCensus:
    r"""The transfers of one whole training step: ``loss_of()`` (forward and loss), backward, gradient clipping to
    :obj:`clip` (``clip_grad_norm_``, as Lightning's ``gradient_clip_val``), the optimiser's step, the schedule's
    step and zeroing the gradients. Run a step or two before it so that lazily created state (the optimiser's) is in
    place, as in a steady-state step."""
    with TransferCensus() as census:
        loss = loss_of()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(parameters, clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return census

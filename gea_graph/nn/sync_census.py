r"""A census of the operations that make the host wait for the device (host syncs).

On a GPU, an operation whose *output size or value* must be known on the host (``tensor.item()``, ``bool(t)``,
``nonzero``, boolean-mask indexing, ``unique``, ``repeat_interleave`` without ``output_size``, ``.cpu()``, ...)
blocks the Python thread until every queued kernel has run. A training step with such an operation cannot run ahead
of the device. :class:`SyncCensus` counts them on **any** device, CPU included, so that a CPU test can check that a
step of a model would not sync on a GPU:

.. code-block:: python

    with SyncCensus() as census:
        loss = model(batch, max_num_nodes=n).sum()
    assert census.count == 0, census.report()

It combines a :class:`~torch.utils._python_dispatch.TorchDispatchMode` (the ATen operations that sync:
:data:`SYNC_OPS`, boolean-mask ``index`` / ``index_put_``, ``repeat_interleave`` without ``output_size``) with a
:class:`~torch.overrides.TorchFunctionMode` (the tensor methods that copy to the host and never reach the dispatcher
on CPU: :data:`SYNC_METHODS`). Each event records the operation and the innermost frame of ``gea_graph`` (or of the
caller) that issued it. The census only observes: code runs the same path with or without it.
"""
from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

#: ATen operations that always need the device's result on the host (a value, or an output size).
SYNC_OPS: frozenset[str] = frozenset({
    "aten._local_scalar_dense.default",  # .item(), bool(t), int(t), float(t)
    "aten.nonzero.default",
    "aten.masked_select.default",
    "aten._unique.default",
    "aten._unique2.default",
    "aten.unique_dim.default",
    "aten.unique_consecutive.default",
    "aten.bincount.default",
    "aten.equal.default",
    "aten.is_nonzero.default",
})

#: Tensor methods that copy a tensor to the host (a sync on a GPU; not dispatched at all on CPU).
SYNC_METHODS: frozenset[str] = frozenset({"tolist", "numpy", "cpu"})

@dataclass(frozen=True)
class SyncEvent:
    r"""One host sync: the operation (``aten.nonzero.default``, ``Tensor.tolist``, ...) and where it was issued
    (``file:line in function``)."""

    op: str
    where: str


def _caller() -> str:
    # The innermost frame of the project (else of the caller) outside torch and this module, and the innermost frame
    # outside torch when that is another library's (e.g. Lightning's), after "via". Walks the frames (no source
    # lines read: the census stays cheap when a step has hundreds of events).
    frame = sys._getframe(1)
    outside = own = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and "/torch/" not in name:
            here = (name, frame.f_lineno, frame.f_code.co_name)
            outside = outside or here
            if "gea_graph" in name:
                own = here
                break
        frame = frame.f_back
    pick = own or outside or ("?", 0, "?")
    where = f"{pick[0].split('gea_graph/')[-1]}:{pick[1]} in {pick[2]}"
    if outside is not None and outside is not pick:
        where += f" via {outside[0].split('site-packages/')[-1]}:{outside[1]}"
    return where


def _bool_index(indices: Any) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def output_read(name: str, args: tuple, kwargs: dict) -> str | None:
    r"""The label of ATen operation ``name`` when it reads a value or an output size on the host (one of
    :data:`SYNC_OPS`, boolean-mask indexing, ``repeat_interleave`` without ``output_size``), else :obj:`None`."""
    if name in SYNC_OPS:
        return name
    if name.startswith(("aten.index.Tensor", "aten.index_put")) and _bool_index(args[1]):
        return f"{name} (boolean mask)"
    if name.startswith("aten.repeat_interleave.") and kwargs.get("output_size") is None:
        return f"{name} (no output_size)"
    return None


class _Dispatch(TorchDispatchMode):
    def __init__(self, census: SyncCensus) -> None:
        super().__init__()
        self.census = census

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        census = self.census
        if not census._inside:
            if read := output_read(name, args, kwargs):
                census._record(read)
            elif name.startswith("aten._to_copy") and _to_host(args[0], kwargs):
                census._record(f"{name} (device to host)")
        if func.namespace not in ("aten", "prim", "prims"):  # a custom operator: its kernel is its own business
            census._inside += 1
            try:
                return func(*args, **kwargs)
            finally:
                census._inside -= 1
        return func(*args, **kwargs)


def _to_host(src: Any, kwargs: dict[str, Any]) -> bool:
    dev = kwargs.get("device")
    return (isinstance(src, torch.Tensor) and src.device.type not in ("cpu", "meta")
            and dev is not None and torch.device(dev).type == "cpu")


class _Function(TorchFunctionMode):
    def __init__(self, census: SyncCensus) -> None:
        super().__init__()
        self.census = census

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if (not self.census._inside and name in SYNC_METHODS and args and isinstance(args[0], torch.Tensor)
                and getattr(torch.Tensor, name, None) is func):
            self.census._record(f"Tensor.{name}")
        return func(*args, **(kwargs or {}))


class SyncCensus:
    r"""Counts host syncs while active (a context manager; re-usable, counts accumulate).

    Attributes:
        events (list[SyncEvent]): every sync, in order.
    """

    def __init__(self) -> None:
        self.events: list[SyncEvent] = []
        self._inside = 0
        self._modes: tuple[_Function, _Dispatch] | None = None

    def _record(self, op: str) -> None:
        self.events.append(SyncEvent(op, _caller()))

    @property
    def count(self) -> int:
        r"""Number of syncs recorded."""
        return len(self.events)

    def by_site(self) -> Counter[tuple[str, str]]:
        r"""``{(op, where): count}``."""
        return Counter((e.op, e.where) for e in self.events)

    def report(self) -> str:
        r"""One line per ``(op, where)`` with its count, most frequent first."""
        if not self.events:
            return "no host syncs"
        return "\n".join(f"{n:4d} x {op} at {where}" for (op, where), n in self.by_site().most_common())

    def __enter__(self) -> Self:
        if self._modes is not None:
            raise RuntimeError("SyncCensus is already active")
        self._modes = (_Function(self), _Dispatch(self))
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._modes is not None
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = None

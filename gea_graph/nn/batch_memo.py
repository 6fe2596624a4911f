r"""What a batch's layers share: a value computed from one of the batch's tensors once a batch, not once a layer.

Every layer of a model is called with the same ``edge_index`` and ``ptr`` tensors of a batch. A value derived from
one of them (GCN's sparse adjacency, the graph sizes of packed attention) is then the same for all layers, and for the
backward pass of each. :class:`LastBatchMemo` keeps the value of the last tensor it saw.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from torch import Tensor

T = TypeVar("T")


class LastBatchMemo(Generic[T]):
    r"""``build(tensor, *key)``, kept for the last tensor seen (one entry).

    The entry is found only for that very tensor (a weak reference, so a new batch's tensor at a reused address is
    not taken for it), unchanged since (its version counter), with the same ``key``. A tensor made under
    :func:`torch.inference_mode` has no version counter: its value is built at every call and not kept.

    Args:
        build (Callable): ``build(tensor, *key) -> value``.
    """

    def __init__(self, build: Callable[..., T]) -> None:
        self.build = build
        self._entry: tuple[weakref.ref, int, tuple[Hashable, ...], T] | None = None

    def get(self, tensor: Tensor, *key: Hashable) -> T:
        r"""The value of :obj:`tensor` and :obj:`key`: the kept one, or a new one (then kept)."""
        if tensor.is_inference():
            return self.build(tensor, *key)
        if self._entry is not None:
            ref, version, old_key, value = self._entry
            if ref() is tensor and version == tensor._version and old_key == key:
                return value
        value = self.build(tensor, *key)
        self._entry = (weakref.ref(tensor), tensor._version, key, value)
        return value

    def clear(self) -> None:
        r"""Forgets the kept value."""
        self._entry = None

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({getattr(self.build, '__name__', self.build)!r})"

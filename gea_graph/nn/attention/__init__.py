r"""Global (dense, all-pairs) attentions with one interface.

Every class here is called as ``attn(x, mask, attn_bias=None) -> out`` with ``x`` of shape
``[B, N, C]``, ``mask`` ``[B, N]`` bool (``True`` = real node) and an optional additive bias
``[B, H, N, N]``. Padding never changes a real output and padded output rows are zero. Go from a
PyG batch to this layout and back with :func:`to_dense` / :func:`from_dense`::

    x_dense, mask = to_dense(x, batch)
    x = from_dense(attn(x_dense, mask), mask)
"""
from __future__ import annotations

from typing import Any

from torch.nn import Module

from .agf import AGFAttention
from .dense import from_dense, key_padding_bias, merge_heads, split_heads, to_dense
from .gfsa import GFSA, GFSACoefficients
from .multihead import DenseAttentionBase, MultiheadAttention
from .plaplacian import PLaplacianAttention

ATTENTIONS = ("softmax", "gfsa", "plaplacian", "agf")


def attention_resolver(name: str, channels: int, heads: int, dropout: float = 0.0,
                       **kwargs: Any) -> Module:
    r"""Builds a global attention by name: ``"softmax"`` (:class:`MultiheadAttention`, also
    ``"mha"`` / ``"multihead"``), ``"gfsa"`` (:class:`GFSA`), ``"plaplacian"``
    (:class:`PLaplacianAttention`, also ``"p-laplacian"``), ``"agf"`` (:class:`AGFAttention`).
    ``dropout`` is the attention dropout; ``kwargs`` go to the class."""
    key = name.lower().replace("_", "").replace("-", "")
    if key in ("softmax", "mha", "multihead", "transformer"):
        return MultiheadAttention(channels, heads, dropout=dropout, **kwargs)
    if key == "gfsa":
        return GFSA(channels, heads, dropout=dropout, **kwargs)
    if key == "plaplacian":
        return PLaplacianAttention(channels, heads, dropout=dropout, **kwargs)
    if key == "agf":
        return AGFAttention(channels, heads, dropout=dropout, **kwargs)
    raise ValueError(f"Unknown attention '{name}' (choose from {', '.join(ATTENTIONS)})")


__all__ = [
    "ATTENTIONS",
    "GFSA",
    "AGFAttention",
    "DenseAttentionBase",
    "GFSACoefficients",
    "MultiheadAttention",
    "PLaplacianAttention",
    "attention_resolver",
    "from_dense",
    "key_padding_bias",
    "merge_heads",
    "split_heads",
    "to_dense",
]

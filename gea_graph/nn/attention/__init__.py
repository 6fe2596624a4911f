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


def attention_class(name: str) -> type[Module]:
    r"""The global attention class of a name: ``"softmax"`` (:class:`MultiheadAttention`, also
    ``"mha"`` / ``"multihead"`` / ``"transformer"``), ``"gfsa"`` (:class:`GFSA`),
    ``"plaplacian"`` (:class:`PLaplacianAttention`, also ``"p-laplacian"``), ``"agf"``
    (:class:`AGFAttention`)."""
    key = name.lower().replace("_", "").replace("-", "")
    if key in ("softmax", "mha", "multihead", "transformer"):
        return MultiheadAttention
    classes = {"gfsa": GFSA, "plaplacian": PLaplacianAttention, "agf": AGFAttention}
    if key in classes:
        return classes[key]
    raise ValueError(f"Unknown attention '{name}' (choose from {', '.join(ATTENTIONS)})")


def attention_resolver(name: str, channels: int, heads: int, dropout: float = 0.0,
                       **kwargs: Any) -> Module:
    r"""Builds the global attention :func:`attention_class` names; ``dropout`` is the attention
    dropout, ``kwargs`` go to the class."""
    return attention_class(name)(channels, heads, dropout=dropout, **kwargs)


__all__ = [
    "ATTENTIONS",
    "GFSA",
    "AGFAttention",
    "DenseAttentionBase",
    "GFSACoefficients",
    "MultiheadAttention",
    "PLaplacianAttention",
    "attention_class",
    "attention_resolver",
    "from_dense",
    "key_padding_bias",
    "merge_heads",
    "split_heads",
    "to_dense",
]

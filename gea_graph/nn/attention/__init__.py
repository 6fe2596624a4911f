r"""Global (all-pairs, within each graph) attentions with one interface, in two calling forms.

**Packed** (what the models use): ``attn(x, plan) -> out`` with PyG's packed node rows ``x``
``[sum N_i, C]`` and the batch's :class:`AttentionPlan` (made once per batch from ``ptr``, shared
by every layer; a structural bias goes in with :meth:`AttentionPlan.with_bias`). Every attention
runs on dense blocks of graphs of similar size (``impl="grouped"``, the default on CPU), or on the
whole padded batch (``impl="dense"``, the reference and the default on a GPU)::

    plan = AttentionPlan(batch.ptr, x.size(0))
    x = attn(x, plan)

**Dense** (the reference): ``attn(x, mask, attn_bias=None) -> out`` with ``x`` of shape
``[B, N, C]``, ``mask`` ``[B, N]`` bool (``True`` = real node) and an optional additive bias
``[B, H, N, N]``. Padding never changes a real output and padded output rows are zero. Go from a
PyG batch to this layout and back with :func:`to_dense` / :func:`from_dense`::

    x_dense, mask = to_dense(x, batch)
    x = from_dense(attn(x_dense, mask), mask)

Both forms compute the same function (``tests/nn/test_attention_packed.py``).
"""
from __future__ import annotations

from typing import Any

from torch.nn import Module

from .agf import AGFAttention
from .dense import from_dense, key_padding_bias, merge_heads, split_heads, to_dense
from .gfsa import GFSA, GFSACoefficients
from .multihead import DenseAttentionBase, MultiheadAttention
from .plan import ATTN_IMPLS, AttentionPlan
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
    "ATTN_IMPLS",
    "GFSA",
    "AGFAttention",
    "AttentionPlan",
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

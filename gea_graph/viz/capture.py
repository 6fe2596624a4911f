"""Read attention maps out of a model during an ordinary forward pass.

The attention modules of :mod:`gea_graph.nn` keep their maps on demand (``store_attention = True``, then the
``attention`` attribute after a forward). This module picks the attention module of one layer of the model's
``layers`` stack, reads its map with :func:`gea_graph.diagnostics.collect.collect_attention`, and cuts the map into
one tensor per graph of the batch:

* ``"self"``: modules derived from ``DenseAttentionBase`` (``MultiheadAttention``, ``GFSA``, ...). The stored map is
  ``[B, H, M, M]`` on the dense batch the module was called with; the module's ``mask`` argument says which
  positions are real. When a graph has one real position more than it has nodes, position 0 is
  the Graphormer graph token and is dropped. Per graph: ``[H, n, n]`` over its atoms.
* ``"external"``: ``ExternalAttention`` modules. The stored map is ``[ΣN, H, S]`` on the sparse batch (rows sum to 1
  over the units), rows in the batch's node order; it is cut into graphs by ``batch.batch``. Per graph:
  ``[n, H, S]``. (With ``norm_scope="batch"`` a graph's map also depends on its batch-mates.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch

from gea_graph.diagnostics.collect import collect_attention
from gea_graph.models.introspect import find_layers
from gea_graph.nn.attention import DenseAttentionBase
from gea_graph.nn.external_attention import ExternalAttention

KINDS = ("external", "self")


def _module_types(kind: str) -> tuple[type[nn.Module], ...]:
    if kind == "self":
        return (DenseAttentionBase,)
    if kind == "external":
        return (ExternalAttention,)
    raise ValueError(f"unknown attention kind {kind!r}; choose from {KINDS}")


def attention_layers(model: nn.Module, kind: str) -> list[int]:
    """Indices (0-based) of the layers of ``model.layers`` that hold an attention module of ``kind``."""
    types = _module_types(kind)
    return [
        i
        for i, layer in enumerate(find_layers(model))
        if any(isinstance(m, types) for m in layer.modules())
    ]


def resolve_layer(model: nn.Module, kind: str, layer: int = -1) -> int:
    """The 0-based index in ``model.layers`` of the layer to read.

    Args:
        layer: 1-based layer number (``1 .. L``), or negative to count from the end (``-1`` = last layer).

    Raises:
        ValueError: if the model has no attention of ``kind``, or that layer has none.
    """
    layers = find_layers(model)
    found = attention_layers(model, kind)
    if not found:
        modules = " / ".join(t.__name__ for t in _module_types(kind))
        other = next(k for k in KINDS if k != kind)
        hint = f"; it has {other} attention: use --kind {other}" if attention_layers(model, other) else ""
        raise ValueError(
            f"the model ({type(model).__name__}) has no {kind} attention: none of its {len(layers)} layers holds "
            f"{'an' if modules[0] in 'AEIOU' else 'a'} {modules} module{hint}"
        )
    if layer == 0 or not -len(layers) <= layer <= len(layers):
        raise ValueError(
            f"layer {layer} out of range: the model has layers 1..{len(layers)} (or -1 = last)"
        )
    index = layer - 1 if layer > 0 else layer + len(layers)
    if index not in found:
        raise ValueError(
            f"layer {layer} has no {kind} attention; layers with one: {[i + 1 for i in found]}"
        )
    return index


@torch.no_grad()
def capture_attention(
    model: nn.Module,
    batch: Batch,
    kind: str,
    layer: int = -1,
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> list[Tensor]:
    """Run ``model`` on ``batch`` (eval mode) and return one attention map per graph from layer ``layer`` (1-based,
    negative from the end; see :func:`resolve_layer`).

    Returns:
        Per graph of the batch, ``[n, H, S]`` (``"external"``) or ``[H, n, n]`` (``"self"``).
    """
    index = resolve_layer(model, kind, layer)
    types = _module_types(kind)
    modules = [m for m in find_layers(model)[index].modules() if isinstance(m, types)]
    if len(modules) != 1:
        raise ValueError(
            f"layer {index + 1} holds {len(modules)} {kind} attention modules; expected one"
        )
    ((attention, mask),) = collect_attention(model, modules, batch, forward)
    if kind == "self":
        return _split_self(attention, mask, batch)
    return _split_external(attention, batch)


def _split_self(attn: Tensor, mask: Tensor, batch: Batch) -> list[Tensor]:
    counts = torch.bincount(batch.batch, minlength=batch.num_graphs).tolist()
    maps = []
    for b, n in enumerate(counts):
        real = mask[b].nonzero().flatten()
        if real.numel() == n + 1:
            real = real[1:]
        elif real.numel() != n:
            raise ValueError(
                f"graph {b} has {n} nodes but the attention saw {real.numel()} real positions"
            )
        maps.append(attn[b][:, real][:, :, real].float())
    return maps


def _split_external(attn: Tensor, batch: Batch) -> list[Tensor]:
    if attn.shape[0] != batch.num_nodes:
        raise ValueError(f"external attention has {attn.shape[0]} rows for {batch.num_nodes} nodes")
    return [attn[batch.batch == b].float() for b in range(batch.num_graphs)]

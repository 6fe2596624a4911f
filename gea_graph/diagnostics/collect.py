"""Read what a model computes inside one forward pass: per-layer node representations and attention maps.

Works for any model whose layers sit in a ``torch.nn.ModuleList`` named ``layers`` (the model's own attribute or a
sub-module's), whatever the layer family: the hooks see each layer's output and :func:`node_states` turns it into
``[ΣN, C]`` node rows aligned with ``batch.batch``. :func:`collect_attention` is the one way to read attention maps,
used by the diagnostics (GFSA's eigenvalues) and by the pictures (:mod:`gea_graph.viz`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.utils import to_dense_batch

from gea_graph.models.introspect import find_layers
from gea_graph.nn.attention import AttentionPlan, DenseAttentionBase


def node_states(output: Any, batch: Batch) -> Tensor:
    """Node representations ``[ΣN, C]`` from a layer's output.

    Accepted outputs: a ``[ΣN, C]`` tensor; ``[ΣN + B, C]`` packed rows with a graph token first in each graph
    (dropped); a dense ``[B, N_max, C]`` tensor, or ``[B, N_max + 1, C]`` whose position 0 is a graph token (dropped);
    a tuple or list whose first item is one of these (e.g. ``(x, edge_attr)``);
    an object with an ``x`` attribute (a ``Data``/``Batch``).
    """
    if isinstance(output, (tuple, list)):
        return node_states(output[0], batch)
    if not isinstance(output, Tensor):
        x = getattr(output, "x", None)
        if not isinstance(x, Tensor):
            raise TypeError(
                f"cannot read node representations from a layer output of type {type(output).__name__}"
            )
        return node_states(x, batch)
    num_nodes = batch.batch.numel()
    if output.dim() == 2 and output.shape[0] == num_nodes:
        return output
    if output.dim() == 2 and output.shape[0] == num_nodes + batch.num_graphs:
        # packed rows with a graph token first in each graph (Graphormer, GraphToken.prepend): drop the tokens
        return output[torch.arange(num_nodes, device=output.device) + batch.batch + 1]
    if output.dim() == 3 and output.shape[0] == batch.num_graphs:
        _, mask = to_dense_batch(
            batch.batch.new_zeros(num_nodes, 1), batch.batch, batch_size=batch.num_graphs
        )
        if output.shape[1] == mask.shape[1] + 1:
            output = output[:, 1:]
        if output.shape[1] == mask.shape[1]:
            return output[mask]
    raise ValueError(
        f"layer output of shape {tuple(output.shape)} matches neither {num_nodes} nodes nor a dense batch of "
        f"{batch.num_graphs} graphs"
    )


@torch.no_grad()
def collect_node_states(
    model: nn.Module, batch: Batch, forward: Callable[[nn.Module, Batch], Any] | None = None
) -> list[Tensor]:
    """Run ``model`` on ``batch`` in eval mode and return the node representations entering the first layer followed
    by those leaving every layer: ``L + 1`` tensors ``[ΣN, C_l]``.

    Args:
        model: a model with a ``layers`` stack (see :func:`~gea_graph.models.find_layers`).
        batch: a PyG batch with ``batch.batch``.
        forward: how to call the model (default ``model(batch)``).
    """
    layers = find_layers(model)
    states: list[Tensor] = []
    handles = [
        layers[0].register_forward_pre_hook(
            lambda _m, args, kwargs: states.append(
                node_states(args[0] if args else next(iter(kwargs.values())), batch)
            ),
            with_kwargs=True,
        )
    ]
    handles += [
        layer.register_forward_hook(lambda _m, _i, out: states.append(node_states(out, batch)))
        for layer in layers
    ]
    try:
        _run_in_eval(model, batch, forward)
    finally:
        for handle in handles:
            handle.remove()
    if len(states) != len(layers) + 1:
        raise RuntimeError(f"expected {len(layers) + 1} hidden states, the hooks saw {len(states)}")
    return [s.detach() for s in states]


@torch.no_grad()
def collect_attention(
    model: nn.Module,
    modules: Sequence[nn.Module],
    batch: Batch,
    forward: Callable[[nn.Module, Batch], Any] | None = None,
) -> list[tuple[Tensor, Tensor | None]]:
    """Run ``model`` on ``batch`` in eval mode while the attention ``modules`` (of :mod:`gea_graph.nn`, inside
    ``model``) keep their maps, and return one ``(map, mask)`` pair per module.

    * A self-attention (a ``DenseAttentionBase``: ``MultiheadAttention``, ``GFSA``, ...) stores ``[B, H, M, M]`` on
      the dense padded batch it computed; ``mask`` ``[B, M]`` says which positions are real (a packed call's
      :class:`~gea_graph.nn.attention.AttentionPlan` gives its dense layout's mask). Position 0 of a graph is the
      Graphormer graph token where the graph has one real position more than nodes.
    * An ``ExternalAttention`` stores ``[ΣN, H, S]`` in the batch's node order; ``mask`` is ``None``.

    Every module's ``store_attention`` and the model's training mode are restored afterwards.

    Raises:
        RuntimeError: if a module did not run exactly once in the forward pass.
    """
    masks: list[list[Tensor]] = [[] for _ in modules]
    with _storing_attention(modules):
        handles = [
            module.register_forward_pre_hook(
                lambda _m, args, kwargs, found=found: found.append(
                    _dense_mask(args[1] if len(args) > 1 else kwargs["mask"])
                ),
                with_kwargs=True,
            )
            for module, found in zip(modules, masks)
            if isinstance(module, DenseAttentionBase)
        ]
        try:
            _run_in_eval(model, batch, forward)
        finally:
            for handle in handles:
                handle.remove()
        maps = [module.attention for module in modules]
    pairs = []
    for module, attention, found in zip(modules, maps, masks):
        dense = isinstance(module, DenseAttentionBase)
        if attention is None or (dense and len(found) != 1):
            raise RuntimeError(
                f"the {type(module).__name__} module did not run exactly once in the forward pass"
            )
        pairs.append((attention, found[0] if dense else None))
    return pairs


@contextmanager
def _storing_attention(modules: Sequence[nn.Module]) -> Iterator[None]:
    storing = [module.store_attention for module in modules]
    for module in modules:
        module.store_attention = True
        module.attention = None
    try:
        yield
    finally:
        for module, was_storing in zip(modules, storing):
            module.store_attention = was_storing


def _run_in_eval(model: nn.Module, batch: Batch, forward: Callable[[nn.Module, Batch], Any] | None) -> None:
    was_training = model.training
    model.eval()
    try:
        (forward or (lambda m, b: m(b)))(model, batch)
    finally:
        model.train(was_training)


def _dense_mask(arg: Tensor | AttentionPlan) -> Tensor:
    # Stored attention maps are in the dense padded layout; a packed call's plan gives that layout's mask.
    return arg.dense_mask if isinstance(arg, AttentionPlan) else arg

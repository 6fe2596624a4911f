"""Read a model's per-layer node representations with forward hooks.

Works for any model whose layers sit in a ``torch.nn.ModuleList`` named ``layers`` (the model's own attribute or a
sub-module's), whatever the layer family: the hooks see each layer's output and :func:`node_states` turns it into
``[ΣN, C]`` node rows aligned with ``batch.batch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.utils import to_dense_batch

from gea_graph.models.introspect import find_layers


def node_states(output: Any, batch: Batch) -> Tensor:
    """Node representations ``[ΣN, C]`` from a layer's output.

    Accepted outputs: a ``[ΣN, C]`` tensor; ``[ΣN + B, C]`` packed rows with a graph token first in each graph
    (dropped); a dense ``[B, N_max, C]`` tensor, or ``[B, N_max + 1, C]`` whose position 0 is a graph token (dropped); a tuple or list whose first item is one of these (e.g. ``(x, edge_attr)``);
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
    was_training = model.training
    model.eval()
    try:
        (forward or (lambda m, b: m(b)))(model, batch)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    if len(states) != len(layers) + 1:
        raise RuntimeError(f"expected {len(layers) + 1} hidden states, the hooks saw {len(states)}")
    return [s.detach() for s in states]

r"""Reading the structure of a built model: the stack of layers that pictures and diagnostics hook into."""
from __future__ import annotations

from torch import nn


def find_layers(model: nn.Module) -> nn.ModuleList:
    r"""The model's layer stack: the first :class:`~torch.nn.ModuleList` called ``layers`` (shallowest first), as every
    model family of :mod:`gea_graph.models` has one.

    Raises:
        ValueError: if the model has none.
    """
    stacks = [
        (name.count("."), name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers"
    ]
    if not stacks:
        raise ValueError(
            f"{type(model).__name__} has no ModuleList named 'layers' to read hidden states from"
        )
    return min(stacks, key=lambda item: item[:2])[2]

r""":func:`torch.compile` for graph batches, whose sizes change every batch.

A batch's sizes (nodes, edges, graphs, the largest graph) differ from batch to batch. ``torch.compile(...,
dynamic=True)`` traces them as symbols, but still specialises a size that is 0 or 1: a batch of one graph (or one
node, or no edge) would compile the model again. :class:`DynamicCompiled` traces with
``torch.fx.experimental._config.backed_size_oblivious`` on, which treats 0 and 1 like any other size, so one
compiled graph serves every batch (``tests/train/test_compile_training.py`` holds the recompile budget).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx.experimental._config as fx_config
from torch.nn import Module


class DynamicCompiled:
    r"""``module`` compiled with ``torch.compile(module, dynamic=True, fullgraph=fullgraph, backend=backend)``,
    called with sizes 0 and 1 traced as symbols (see the module doc). Not a :class:`~torch.nn.Module` itself, so that
    holding one adds no parameters or state-dict keys to its owner.

    Args:
        module (torch.nn.Module): The module (its parameters are shared, not copied).
        backend (str, optional): The :func:`torch.compile` backend. (default: :obj:`"inductor"`)
        fullgraph (bool, optional): Refuse graph breaks. (default: :obj:`True`)
        mode (str, optional): The :func:`torch.compile` mode. (default: :obj:`None`)
    """

    def __init__(self, module: Module, backend: Any = "inductor", fullgraph: bool = True,
                 mode: str | None = None) -> None:
        self.module = module
        self.compiled = torch.compile(module, dynamic=True, fullgraph=fullgraph, backend=backend, mode=mode)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with fx_config.patch(backed_size_oblivious=True):
            return self.compiled(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({type(self.module).__name__})"

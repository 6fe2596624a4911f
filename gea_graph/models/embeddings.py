r"""Summed embedding tables: one table per column of a long feature matrix, the look-ups added."""
from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor
from torch.nn import Embedding, Module, ModuleList


def summed_embeddings(x: Tensor, weights: Sequence[Tensor]) -> Tensor:
    r""":math:`\sum_i \mathbf{W}_i[x_{:, i}]` for a long feature matrix ``x`` ``[N, F]`` and embedding tables
    ``weights[i]`` ``[V_i, C]`` (the first ``F`` of them): ``[N, C]``, one look-up per column
    (:func:`torch.nn.functional.embedding`), with the gradients of the tables."""
    weights = list(weights)[:x.size(1)]
    out = F.embedding(x[:, 0], weights[0])
    for i in range(1, len(weights)):
        out = out + F.embedding(x[:, i], weights[i])
    return out


class ColumnEmbedding(Module):
    r"""One embedding table per column of a long feature matrix ``[N, F]``, summed: ``[N, F] -> [N, C]``
    (TreeNeighbourMatch keys/values, other categorical features)."""

    def __init__(self, columns: int, vocab: int, channels: int) -> None:
        super().__init__()
        self.columns, self.vocab, self.channels = columns, vocab, channels
        self.tables = ModuleList([Embedding(vocab, channels) for _ in range(columns)])

    def reset_parameters(self) -> None:
        for table in self.tables:
            table.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 1:  # one column given as a vector (no view with -1: it does not trace for 0-row batches)
            x = x.unsqueeze(-1)
        return summed_embeddings(x, [table.weight for table in self.tables])

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.columns}, vocab={self.vocab}, channels={self.channels})"

"""Random-walk return probabilities as positional encodings, batched over graphs of equal size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from gea_graph.transforms._graphs import check_dense_size, chunks, dense_adjacency, group_by_size, single_threaded


class RWPE(BaseTransform):
    r"""Landing probabilities of random walks, from the `"Graph Neural Networks with Learnable Structural and
    Positional Representations" <https://arxiv.org/abs/2110.07875>`_ paper.

    .. math::
        \mathrm{rw\_pe}_{i, \ell} = \left(\mathbf{P}^{\ell}\right)_{ii}, \quad
        \mathbf{P} = \mathbf{D}^{-1} \mathbf{A}, \quad \ell = 1, \ldots, L

    :math:`\mathbf{A}` is the simple undirected graph underlying ``edge_index`` (symmetrised, no self-loops,
    unweighted); an isolated node has a zero row in :math:`\mathbf{P}` and so a zero encoding.

    Adds ``rw_pe`` :math:`(N, L)` float to each graph.

    PyG's :class:`~torch_geometric.transforms.AddRandomWalkPE` gives the same numbers on unweighted undirected graphs
    but is not reused: it handles one graph at a time (too slow for a dataset build), weights edges wrongly
    when ``edge_weight`` is present (it divides by the weighted degree only), and walks along directed edges only
    (zero everywhere on TreeNeighbourMatch's child->parent trees). :meth:`forward_many` computes the matrix powers
    on ``[G, N, N]`` stacks of equal-size graphs, so a graph beyond
    :data:`~gea_graph.transforms.MAX_DENSE_NODES` nodes is refused (a :class:`ValueError` naming its size).

    Args:
        walk_length (int): The number of walk lengths :math:`L`.
    """

    def __init__(self, walk_length: int) -> None:
        if walk_length < 1:
            raise ValueError(f"RWPE needs walk_length >= 1, got {walk_length}")
        self.walk_length = walk_length

    def forward(self, data: Data) -> Data:
        return self.forward_many([data])[0]

    def forward_many(self, data_list: Sequence[Data]) -> list[Data]:
        """Applies the transform to many graphs at once (graphs are modified in place and returned)."""
        for num_nodes, ids in group_by_size(data_list).items():
            check_dense_size(num_nodes, repr(self))
            for part in chunks(ids, num_nodes):
                pe = self._encode(dense_adjacency(data_list, part, num_nodes))
                for g, i in enumerate(part):
                    data_list[i].rw_pe = torch.from_numpy(pe[g])
        return list(data_list)

    def _encode(self, adj: np.ndarray) -> np.ndarray:
        num_graphs, n, _ = adj.shape
        deg = adj.sum(-1, keepdims=True)
        walk = torch.from_numpy(np.divide(adj, deg, out=np.zeros_like(adj), where=deg > 0))
        out = torch.empty((num_graphs, n, self.walk_length), dtype=torch.float32)
        power = walk
        with single_threaded():
            for step in range(self.walk_length):
                if step > 0:
                    power = power @ walk
                out[:, :, step] = torch.diagonal(power, dim1=1, dim2=2)
        return out.numpy()

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(walk_length={self.walk_length})"

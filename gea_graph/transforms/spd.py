"""All-pairs shortest-path distances and paths (Graphormer's spatial and edge encodings)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform


class ShortestPathDistance(BaseTransform):
    r"""All-pairs hop distances and the edges along one shortest path per pair, from the `"Do Transformers Really
    Perform Bad for Graph Representation?" <https://arxiv.org/abs/2106.05234>`_ paper.

    Distances come from one breadth-first search per source in C (:func:`scipy.sparse.csgraph.shortest_path` with
    ``unweighted=True``) on the undirected graph underlying ``edge_index``. Paths are read out of its predecessor
    matrix: the hop after node :math:`u` on the way to :math:`t` is ``pred[t, u]``, so all :math:`N^2` paths are
    walked forward together, ``max_path`` vectorised steps in all.

    Adds to each graph (see ``docs/design.md``):

    - ``spd_index`` :math:`(2, N^2)` long: all ordered pairs :math:`(s, t)`, row-major (it contains ``index``, so
      PyG offsets it by the node count when batching);
    - ``spd`` :math:`(N^2)` long: hop distance, capped at ``max_distance``; unreachable pairs get
      ``max_distance + 1``;
    - ``spd_path`` :math:`(N^2, \text{max\_path})` long: positions in the graph's ``edge_index`` of the first
      ``max_path`` edges along one shortest path from :math:`s` to :math:`t`, padded with :obj:`-1`. Where only the
      reverse of a step is stored (e.g. child->parent trees) the reverse edge's id is used.

    Args:
        max_distance (int, optional): The distance cap. (default: :obj:`20`)
        max_path (int, optional): How many edges of each path to keep (Graphormer's ``multi_hop_max_dist``).
            (default: :obj:`5`)
    """

    def __init__(self, max_distance: int = 20, max_path: int = 5) -> None:
        if max_distance < 1 or max_path < 0:
            raise ValueError(f"ShortestPathDistance needs max_distance >= 1 and max_path >= 0, "
                             f"got max_distance={max_distance}, max_path={max_path}")
        self.max_distance = max_distance
        self.max_path = max_path

    def forward(self, data: Data) -> Data:
        n = int(data.num_nodes)
        ei = data.edge_index.numpy() if data.edge_index is not None else np.zeros((2, 0), np.int64)
        num_edges = ei.shape[1]

        adj = sp.csr_matrix((np.ones(num_edges), (ei[0], ei[1])), shape=(n, n))
        dist, pred = shortest_path(adj, method="D", directed=False, unweighted=True, return_predecessors=True)
        unreachable = np.isinf(dist)
        hops = np.where(unreachable, 0, dist).astype(np.int64).ravel()
        spd = np.minimum(hops, self.max_distance)
        spd[unreachable.ravel()] = self.max_distance + 1

        # Edge id of each ordered step (u, v), flat as u * n + v; the reverse edge stands in where only (v, u) is
        # stored.
        edge_id = np.full(n * n, -1, dtype=np.int64)
        edge_id[ei[1] * n + ei[0]] = np.arange(num_edges)
        edge_id[ei[0] * n + ei[1]] = np.arange(num_edges)

        pairs = np.arange(n * n, dtype=np.int64)
        src, dst = np.divmod(pairs, n)
        path = np.full((n * n, self.max_path), -1, dtype=np.int64)
        # Finished and unreachable pairs step in place (pred -9999 -> the node itself); the hop count masks them.
        step_of = np.where(pred < 0, np.arange(n)[None, :], pred).ravel()
        cur = src
        for step in range(min(self.max_path, int(hops.max(initial=0)))):
            nxt = step_of[dst * n + cur]
            path[:, step] = np.where(hops > step, edge_id[cur * n + nxt], -1)
            cur = nxt

        data.spd_index = torch.from_numpy(np.stack([src, dst]))
        data.spd = torch.from_numpy(spd)
        data.spd_path = torch.from_numpy(path)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(max_distance={self.max_distance}, max_path={self.max_path})"

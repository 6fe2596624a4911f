"""Helpers shared by the positional-encoding transforms: dense adjacency stacks grouped by graph size."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from torch_geometric.data import Data

# Upper bound on the number of float64 entries of one [G, N, N] stack (128 MiB), so memory stays flat on big graphs.
MAX_STACK_ENTRIES = 1 << 24
#: The largest graph whose dense N x N matrices the positional encodings build (one such float64 matrix is 128 MiB,
#: and its eigendecomposition or matrix powers take seconds). Inputs are bounded far below it (the size bounds of
#: ``gea_graph.data.featurizers``, 1,000 nodes by default, at most this); a larger graph is refused, never computed.
MAX_DENSE_NODES = 4096


def check_dense_size(num_nodes: int, what: str) -> None:
    """Raises :class:`ValueError` (one line, naming :obj:`what`) for a graph beyond :data:`MAX_DENSE_NODES`."""
    if num_nodes > MAX_DENSE_NODES:
        raise ValueError(f"{what}: a graph of {num_nodes:,} nodes is beyond the {MAX_DENSE_NODES:,} whose dense "
                         f"N x N matrices the positional encodings build; bound the inputs' size (max_nodes)")


def group_by_size(data_list: Sequence[Data]) -> dict[int, list[int]]:
    """Positions of the graphs in :obj:`data_list`, grouped by their number of nodes."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, data in enumerate(data_list):
        groups[int(data.num_nodes)].append(i)
    return groups


def chunks(ids: list[int], num_nodes: int) -> Iterator[list[int]]:
    """Splits one size group into chunks whose dense ``[G, N, N]`` stack stays under :data:`MAX_STACK_ENTRIES`
    (graphs beyond :data:`MAX_DENSE_NODES` are refused)."""
    check_dense_size(num_nodes, "positional encoding")
    step = max(1, MAX_STACK_ENTRIES // max(1, num_nodes * num_nodes))
    for start in range(0, len(ids), step):
        yield ids[start:start + step]


def dense_adjacency(data_list: Sequence[Data], ids: list[int], num_nodes: int) -> np.ndarray:
    """The simple undirected adjacency matrices of graphs of equal size, stacked as ``[G, N, N] float64``.

    Edges are symmetrised and self-loops and multi-edges dropped: the positional encodings describe the simple
    undirected graph underlying ``edge_index`` (TreeNeighbourMatch stores only child->parent edges, for instance).
    Graphs beyond :data:`MAX_DENSE_NODES` are refused.
    """
    check_dense_size(num_nodes, "dense adjacency")
    adj = np.zeros((len(ids), num_nodes, num_nodes), dtype=np.float64)
    graph, src, dst = _stacked_edges(data_list, ids)
    adj[graph, src, dst] = 1.0
    adj[graph, dst, src] = 1.0
    diag = np.arange(num_nodes)
    adj[:, diag, diag] = 0.0
    return adj


def _stacked_edges(data_list: Sequence[Data], ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    graphs, srcs, dsts = [], [], []
    for g, i in enumerate(ids):
        edge_index = data_list[i].edge_index
        if edge_index is None or edge_index.numel() == 0:
            continue
        ei = edge_index.numpy()
        graphs.append(np.full(ei.shape[1], g, dtype=np.int64))
        srcs.append(ei[0])
        dsts.append(ei[1])
    if not graphs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(graphs), np.concatenate(srcs), np.concatenate(dsts)


_THREADPOOLS: list[ThreadpoolController] = []  # found once, when first needed: the search is not free


@contextmanager
def single_threaded() -> Iterator[None]:
    """Runs torch's CPU kernels and NumPy's BLAS/LAPACK on one thread inside the block.

    The stacks hold many small matrices: threads inside each LAPACK/BLAS call buy nothing there, and on a busy
    machine they made a batched ``eigh`` (torch's, and NumPy's on OpenBLAS) much slower.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if not _THREADPOOLS:
            _THREADPOOLS.append(ThreadpoolController())
        with _THREADPOOLS[0].limit(limits=1):
            yield
    finally:
        torch.set_num_threads(previous)

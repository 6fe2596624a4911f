"""Laplacian eigenvector positional encodings, batched over graphs of equal size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from gea_graph.transforms._graphs import check_dense_size, chunks, dense_adjacency, group_by_size, single_threaded

PADDINGS = ("zero", "nan")


class LapPE(BaseTransform):
    r"""Eigenvectors and eigenvalues of the graph Laplacian as positional encodings.

    For :obj:`normalization="sym"` the Laplacian is
    :math:`\mathbf{L} = \mathbf{I}' - \mathbf{D}^{-1/2} \mathbf{A} \mathbf{D}^{-1/2}`, where :math:`\mathbf{I}'` has
    a one on the diagonal of every node of non-zero degree (Chung's convention: an isolated node gets a zero row, so
    it is a component of its own with eigenvalue 0). For :obj:`normalization=None` it is
    :math:`\mathbf{L} = \mathbf{D} - \mathbf{A}`. :math:`\mathbf{A}` is the simple undirected graph underlying
    ``edge_index`` (symmetrised, no self-loops, unweighted).

    *Non-trivial* means outside the null space of :math:`\mathbf{L}`. That null space has exactly one dimension per
    connected component (isolated nodes included), spanned by per-component indicator vectors (scaled by
    :math:`\mathbf{D}^{1/2}` for ``"sym"``), which only say which component a node is in. So by default a graph with
    :math:`c` components drops its :math:`c` smallest eigenpairs (found by counting components, not by thresholding
    eigenvalues) and keeps the next :math:`k`. For a connected graph this is the usual "drop the first eigenvector".
    With :obj:`keep_trivial=True` the :math:`k` smallest eigenpairs are kept, trivial ones (:math:`\lambda = 0`)
    included, as GraphGPS and the GEAET code do. Graphs with fewer eigenpairs than :math:`k` are padded
    (:obj:`padding`: zeros, or NaN as GraphGPS), and ``lap_mask`` marks the real eigenpairs. Eigenvalues are clamped
    at 0 (rounding can make the trivial ones slightly negative). Within a repeated eigenvalue the basis is whatever
    LAPACK returns, and each eigenvector's sign is arbitrary: models should flip signs at random during training.
    Both are reproducible: a graph gets the same eigenvectors whatever graphs it is computed with (a dataset build's
    chunk or one molecule at inference).

    The GEAET Peptides-struct LapPE (GraphGPS ``laplacian_norm: none``, ``max_freqs: 10``, geaet-notes §2.2) is
    ``LapPE(10, normalization=None, keep_trivial=True, padding="nan")``, spec
    ``"lap:10:norm=none:trivial=keep:pad=nan"``.

    Adds to each graph (see ``docs/design.md``):

    - ``lap_eigvec`` :math:`(N, k)` float: unit-norm eigenvectors, padded;
    - ``lap_eigval`` :math:`(N, k)` float: their eigenvalues, repeated on every node, padded;
    - ``lap_mask`` :math:`(N, k)` bool: :obj:`True` where the eigenpair exists.

    PyG's :class:`~torch_geometric.transforms.AddLaplacianEigenvectorPE` is not reused: it returns no eigenvalues,
    does not pad (it fails for :math:`N \le k`), drops only one trivial eigenvector on disconnected graphs, and works
    one graph at a time. :meth:`forward_many` instead stacks graphs of equal size and calls one batched
    :func:`torch.linalg.eigh` per size, which is what makes a ZINC build take seconds. Being dense, it refuses a graph
    beyond :data:`~gea_graph.transforms.MAX_DENSE_NODES` nodes (a :class:`ValueError` naming its size).

    Args:
        k (int): Number of eigenpairs kept.
        normalization (str, optional): :obj:`"sym"` for the symmetric normalised Laplacian, :obj:`None` for the
            combinatorial one. (default: :obj:`"sym"`)
        keep_trivial (bool, optional): Keep the trivial eigenpairs (:math:`\lambda = 0`, one per component) among
            the :math:`k`. (default: :obj:`False`)
        padding (str, optional): Value of the padding, :obj:`"zero"` or :obj:`"nan"`. (default: :obj:`"zero"`)
    """

    def __init__(self, k: int, normalization: str | None = "sym", keep_trivial: bool = False,
                 padding: str = "zero") -> None:
        if k < 1:
            raise ValueError(f"LapPE needs k >= 1 eigenpairs, got k={k}")
        if normalization not in ("sym", None):
            raise ValueError(f"LapPE normalization must be 'sym' or None, got {normalization!r}")
        if padding not in PADDINGS:
            raise ValueError(f"LapPE padding must be one of {PADDINGS}, got {padding!r}")
        self.k = k
        self.normalization = normalization
        self.keep_trivial = bool(keep_trivial)
        self.padding = padding

    def forward(self, data: Data) -> Data:
        return self.forward_many([data])[0]

    def forward_many(self, data_list: Sequence[Data]) -> list[Data]:
        """Applies the transform to many graphs at once (graphs are modified in place and returned)."""
        for num_nodes, ids in group_by_size(data_list).items():
            check_dense_size(num_nodes, repr(self))
            for part in chunks(ids, num_nodes):
                vec, val, mask = self._encode(dense_adjacency(data_list, part, num_nodes))
                for g, i in enumerate(part):
                    data_list[i].lap_eigvec = torch.from_numpy(vec[g])
                    data_list[i].lap_eigval = torch.from_numpy(val[g])
                    data_list[i].lap_mask = torch.from_numpy(mask[g])
        return list(data_list)

    def _encode(self, adj: np.ndarray):
        num_graphs, n, _ = adj.shape
        k = self.k
        if n == 0:
            shape = (num_graphs, 0, k)
            return np.zeros(shape, np.float32), np.zeros(shape, np.float32), np.zeros(shape, bool)
        deg = adj.sum(-1)
        if self.normalization == "sym":
            inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
            lap = -inv_sqrt[:, :, None] * adj * inv_sqrt[:, None, :]
            lap[:, np.arange(n), np.arange(n)] += (deg > 0)
        else:
            lap = -adj
            lap[:, np.arange(n), np.arange(n)] += deg
        # Ascending eigenvalues, one LAPACK call per matrix. NumPy copies every matrix of the stack into the same
        # work buffer before the call, so a graph's eigenvectors (signs and the basis of a repeated eigenvalue) do not
        # depend on which graphs share its stack; torch's batched eigh (MKL) gives results that depend on each
        # matrix's memory alignment, i.e. on its place in the stack: a molecule would get other signs in a dataset
        # build than alone at inference.
        with single_threaded():
            eigval, eigvec = np.linalg.eigh(lap)

        # Column j of the output is eigenpair (skipped + j) of each graph, when it exists.
        skipped = np.zeros(num_graphs, np.int64) if self.keep_trivial else _num_components(adj)
        cols = skipped[:, None] + np.arange(k)[None, :]  # [G, k]
        valid = cols < n
        cols = np.minimum(cols, n - 1)
        fill = np.nan if self.padding == "nan" else 0.0
        val = np.where(valid, np.maximum(np.take_along_axis(eigval, cols, axis=1), 0.0), fill)  # [G, k]
        vec = np.take_along_axis(eigvec, np.broadcast_to(cols[:, None, :], (num_graphs, n, k)), axis=2)
        vec = np.where(valid[:, None, :], vec, fill)
        mask = np.broadcast_to(valid[:, None, :], (num_graphs, n, k))
        val = np.broadcast_to(val[:, None, :], (num_graphs, n, k))
        return vec.astype(np.float32), val.astype(np.float32), mask.copy()  # copies: writable, contiguous

    def __repr__(self) -> str:
        # ``solver`` names what computes the eigenvectors (their signs): part of the cache key of built datasets.
        return (f"{self.__class__.__name__}(k={self.k}, normalization={self.normalization!r}, "
                f"keep_trivial={self.keep_trivial}, padding={self.padding!r}, solver='numpy')")


def _num_components(adj: np.ndarray) -> np.ndarray:
    """Number of connected components of each graph of a ``[G, N, N]`` stack, from one block-diagonal call."""
    num_graphs, n, _ = adj.shape
    graph, src, dst = np.nonzero(adj)
    offset = graph * n
    block = sp.coo_matrix((np.ones(len(src)), (src + offset, dst + offset)), shape=(num_graphs * n,) * 2)
    _, labels = connected_components(block, directed=False)
    # Components never cross graphs, so each graph's labels are a distinct set: count the distinct ones per row.
    labels = np.sort(labels.reshape(num_graphs, n), axis=1)
    return 1 + (np.diff(labels, axis=1) != 0).sum(axis=1)

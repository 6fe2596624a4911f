"""All-pairs shortest-path distances and paths (Graphormer's spatial and edge encodings)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

# Node pairs per call of :func:`shortest_paths_many` in :meth:`ShortestPathDistance.forward_many` (about 9,000
# PCQM4Mv2 molecules): bounds one chunk's working arrays to a few hundred MiB at ``max_path = 20``.
MAX_CHUNK_PAIRS = 1 << 21
# Distances are computed in 16 bits at most; a graph this large would have over 4 * 10^9 pairs anyway.
MAX_NODES = 65_000


class ShortestPathDistance(BaseTransform):
    r"""All-pairs hop distances and the edges along one shortest path per pair, from the `"Do
    Transformers Really Perform Bad for Graph Representation?"
    <https://arxiv.org/abs/2106.05234>`_ paper.

    Distances are exact hop counts on the undirected graph underlying ``edge_index``. Paths step
    from :math:`u` towards :math:`t` through the first neighbour :math:`v` (in ascending order)
    with :math:`d(v, t) = d(u, t) - 1`. Whole-array numpy computes them with no loop over
    graphs, nodes or pairs: a search of all sources at once on bitsets (:func:`hop_distances`) and
    ``max_path`` vectorised gathers (:func:`shortest_paths_many`); :meth:`forward_many` handles
    thousands of molecules per call, and :meth:`forward` is the same on one graph.

    Adds to each graph (see ``docs/design.md``):

    - ``spd_index`` :math:`(2, N^2)` long: all ordered pairs :math:`(s, t)`, row-major (it
      contains ``index``, so PyG offsets it by the node count when batching);
    - ``spd`` :math:`(N^2)` long: hop distance, capped at ``max_distance``; unreachable pairs get
      ``max_distance + 1``;
    - ``spd_path`` :math:`(N^2, \text{max\_path})` long: positions in the graph's ``edge_index``
      of the first ``max_path`` edges along one shortest path from :math:`s` to :math:`t`, padded
      with :obj:`-1`. Where only the reverse of a step is stored (e.g. child->parent trees) the
      reverse edge's id is used.

    Args:
        max_distance (int, optional): The distance cap. (default: :obj:`20`)
        max_path (int, optional): How many edges of each path to keep; must be at least the
            model's Graphormer ``max_hops`` (``multi_hop_max_dist``), which
            :class:`~gea_graph.nn.EdgeEncoding` checks. (default: :obj:`None` = ``max_distance``,
            so that ``spd:20`` serves a model reading up to 20 hops)
    """

    def __init__(self, max_distance: int = 20, max_path: int | None = None) -> None:
        if max_path is None:
            max_path = max_distance
        if max_distance < 1 or max_path < 0:
            raise ValueError(f"ShortestPathDistance needs max_distance >= 1 and max_path >= 0, "
                             f"got max_distance={max_distance}, max_path={max_path}")
        self.max_distance = max_distance
        self.max_path = max_path

    def forward(self, data: Data) -> Data:
        return self.forward_many([data])[0]

    def forward_many(self, data_list: Sequence[Data]) -> list[Data]:
        """Applies the transform to many graphs at once (graphs are modified in place and returned), by
        :func:`shortest_paths_many` on chunks of about :data:`MAX_CHUNK_PAIRS` node pairs."""
        data_list = list(data_list)
        if not data_list:
            return data_list
        num_nodes = np.array([int(data.num_nodes) for data in data_list], dtype=np.int64)
        edges = [data.edge_index.numpy() if data.edge_index is not None else np.zeros((2, 0), np.int64)
                 for data in data_list]
        num_edges = np.array([ei.shape[1] for ei in edges], dtype=np.int64)
        pairs = num_nodes * num_nodes
        for lo, hi in _pair_chunks(pairs):
            # A chunk of one graph is written as int64 straight away and handed over without a copy; a
            # chunk of many is cut into copies, so no graph's tensors keep the whole chunk alive.
            single = hi - lo == 1
            spd, path = shortest_paths_many(num_nodes[lo:hi], np.concatenate(edges[lo:hi], axis=1),
                                            num_edges[lo:hi], self.max_distance, self.max_path, wide=single)
            ends = np.cumsum(pairs[lo:hi])
            for i, end in zip(range(lo, hi), ends):
                n, begin = int(num_nodes[i]), end - pairs[i]
                data = data_list[i]
                data.spd_index = _pair_index(n)
                data.spd = torch.from_numpy(spd[begin:end].astype(np.int64, copy=not single))
                data.spd_path = torch.from_numpy(path[begin:end].astype(np.int64, copy=not single))
        return data_list

    def arrays_many(self, num_nodes: np.ndarray, edge_index: np.ndarray, num_edges: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The transform's ``spd`` and ``spd_path`` of many graphs given as concatenated arrays (see
        :func:`shortest_paths_many`), in its compact dtypes, in chunks of about :data:`MAX_CHUNK_PAIRS` pairs:
        what a dataset build stores without making a :class:`~torch_geometric.data.Data` per graph. ``spd_index``
        follows from ``num_nodes``."""
        num_nodes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
        num_edges = np.asarray(num_edges, dtype=np.int64).reshape(-1)
        edge_ptr = np.concatenate([[0], np.cumsum(num_edges)])
        spds, paths = [], []
        for lo, hi in _pair_chunks(num_nodes * num_nodes):
            spd, path = shortest_paths_many(num_nodes[lo:hi], edge_index[:, edge_ptr[lo]:edge_ptr[hi]],
                                            num_edges[lo:hi], self.max_distance, self.max_path)
            spds.append(spd)
            paths.append(path)
        if not spds:
            return np.zeros(0, np.uint8), np.zeros((0, self.max_path), np.int16)
        return np.concatenate(spds), np.concatenate(paths)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(max_distance={self.max_distance}, "
                f"max_path={self.max_path})")


def _pair_chunks(pairs: np.ndarray) -> list[tuple[int, int]]:
    """``(lo, hi)`` ranges of graphs: a range holds the graphs whose first pair falls in one
    :data:`MAX_CHUNK_PAIRS`-long stretch."""
    if len(pairs) <= 1:  # no graph, or one (a chunk of its own whatever its size)
        return [(0, len(pairs))] if len(pairs) else []
    chunk = (np.cumsum(pairs) - pairs) // MAX_CHUNK_PAIRS
    bounds = [0, *(np.flatnonzero(np.diff(chunk)) + 1).tolist(), len(pairs)]
    return list(itertools.pairwise(bounds))


def _pair_index(n: int) -> torch.Tensor:
    """All ordered pairs ``(s, t)`` of ``n`` nodes, row-major, as ``[2, n * n]`` long."""
    return torch.from_numpy(np.indices((n, n), dtype=np.int64).reshape(2, n * n))


def shortest_paths_many(num_nodes: np.ndarray, edge_index: np.ndarray, num_edges: np.ndarray,
                        max_distance: int, max_path: int, wide: bool = False) -> tuple[np.ndarray, np.ndarray]:
    r"""Capped hop distances and shortest-path edge ids of all node pairs of many graphs at once.

    The graphs come concatenated: graph :math:`g` has :math:`N_g` = ``num_nodes[g]`` nodes and
    :math:`E_g` = ``num_edges[g]`` edges, stored in order in ``edge_index`` :math:`(2, \sum_g E_g)`
    with node ids local to the graph (:math:`0 \le s, t < N_g`). Distances are hop counts on the
    undirected graph underlying each ``edge_index`` (self-loops ignored). Pair outputs are flat over
    :math:`P = \sum_g N_g^2` pairs: graph :math:`g`'s pairs :math:`(s, t)` row-major, graphs in order.

    - ``spd`` :math:`(P)`: :math:`\min(d(s, t), \text{max\_distance})`, and
      ``max_distance + 1`` where :math:`t` is unreachable from :math:`s`; the smallest unsigned dtype
      holding ``max_distance + 1`` (uint8 up to 254).
    - ``spd_path`` :math:`(P, \text{max\_path})`: the first ``max_path`` edges of one shortest path
      from :math:`s` to :math:`t`, as positions in graph :math:`g`'s own ``edge_index``, padded with
      :obj:`-1`; int16 when every :math:`E_g < 32767`, else int32. The path steps from :math:`u`
      through the first neighbour :math:`v` (ascending) with :math:`d(v, t) = d(u, t) - 1`; a step
      :math:`(u, v)` takes the id of a stored edge :math:`(u, v)`, else of its reverse (the last
      one among duplicates).
    - ``wide``: both outputs as int64 instead (the dtype of the transform's tensors), written so
      directly.

    All graphs are handled by the same whole-array numpy calls (no loop over graphs, nodes or pairs):
    a breadth-first search on bitsets (:func:`hop_distances`), the first step of every pair
    (:func:`_next_steps`), then one gather per further step: the :math:`k`-th edge from :math:`s`
    towards :math:`t` is the :math:`(k-1)`-th from the first step's end :math:`v` towards :math:`t`,
    so column :math:`k` of the paths is column :math:`k - 1` read at the pairs :math:`(v, t)`.
    The results of a graph do not depend on the other graphs.
    """
    num_nodes = np.ascontiguousarray(num_nodes, dtype=np.int64).reshape(-1)
    num_edges = np.asarray(num_edges, dtype=np.int64).reshape(-1)
    edge_index = np.asarray(edge_index, dtype=np.int64)
    _check_graphs(num_nodes, edge_index, num_edges, max_distance, max_path)
    nbr, nbr_edge = neighbour_slots(edge_index, num_nodes, num_edges)
    spd_dtype = np.dtype(np.int64 if wide else np.min_scalar_type(max_distance + 1))
    edge_dtype = np.int16 if num_edges.max(initial=0) < np.iinfo(np.int16).max else np.int32
    path_dtype = np.dtype(np.int64 if wide else edge_dtype)
    dist, diameter = hop_distances(nbr, num_nodes)

    # Cap; the unreachable marker (the dtype's maximum, above every finite distance) maps past the cap.
    marker = np.iinfo(dist.dtype).max
    spd = np.minimum(dist, min(max_distance, marker), out=np.empty(dist.shape, spd_dtype), casting="unsafe")
    np.copyto(spd, max_distance + 1, where=dist == marker)
    # Past the longest finite distance every path is padding: walk no further.
    steps = min(max_path, diameter)
    path = np.empty((dist.size, max_path), dtype=path_dtype)
    path[:, steps:] = -1
    if steps:
        step_to, column = _next_steps(dist, nbr, nbr_edge.astype(edge_dtype), num_nodes)
        # The walk runs on contiguous columns in the compact edge dtype (a gather into a strided int64 column is
        # much slower), then one transposing copy (torch's: numpy's is slower) writes them into the rows.
        columns = np.empty((steps, dist.size), dtype=column.dtype)
        columns[0] = column
        for step in range(1, steps):
            np.take(columns[step - 1], step_to, out=columns[step], mode="clip")  # step_to is in range
        torch.from_numpy(path[:, :steps]).copy_(torch.from_numpy(columns).t())
    return spd, path


def _check_graphs(num_nodes: np.ndarray, edge_index: np.ndarray, num_edges: np.ndarray,
                  max_distance: int, max_path: int) -> None:
    if max_distance < 1 or max_path < 0:
        raise ValueError(f"shortest paths need max_distance >= 1 and max_path >= 0, "
                         f"got max_distance={max_distance}, max_path={max_path}")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    if num_nodes.size != num_edges.size:
        raise ValueError(f"num_nodes and num_edges must have one entry per graph, got {num_nodes.size} "
                         f"and {num_edges.size}")
    if (num_nodes < 0).any() or (num_edges < 0).any():
        raise ValueError("num_nodes and num_edges must be non-negative")
    if num_nodes.max(initial=0) > MAX_NODES:
        raise ValueError(f"shortest paths take graphs of at most {MAX_NODES} nodes, got one of "
                         f"{num_nodes.max()}")
    if num_edges.sum() != edge_index.shape[1]:
        raise ValueError(f"num_edges sums to {num_edges.sum()} but edge_index has "
                         f"{edge_index.shape[1]} edges")
    size = np.repeat(num_nodes, num_edges)
    bad = np.flatnonzero(((edge_index < 0) | (edge_index >= size)).any(axis=0))
    if bad.size:
        graph = np.searchsorted(np.cumsum(num_edges), bad[0], side="right")
        raise ValueError(f"edge {edge_index[:, bad[0]].tolist()} of graph {graph} is out of range: its "
                         f"node ids must lie in [0, {num_nodes[graph]})")


def neighbour_slots(edge_index: np.ndarray, num_nodes: np.ndarray,
                    num_edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Undirected neighbour lists of concatenated graphs (see :func:`shortest_paths_many`) as
    ``[M, D]`` slots over the :math:`M = \sum_g N_g` nodes numbered globally, graph after graph
    (``D`` = max degree, at least 1; neighbours ascending, rows padded with the node itself, since a
    self step neither shortens a distance nor grows a ball) and the graph-local edge id of each
    slot's step ``[M, D]`` (padding :obj:`-1`). A step :math:`(u, v)` takes the id of a stored edge
    :math:`(u, v)`, else of the reverse :math:`(v, u)`; among duplicates the last one wins.
    Self-loops are dropped."""
    m = int(num_nodes.sum())
    if num_nodes.size == 1:  # one graph: its ids are the global ones
        src, dst = edge_index
        ids = np.arange(src.size, dtype=np.int64)
    else:
        edge_graph = np.repeat(np.arange(num_nodes.size), num_edges)
        src, dst = edge_index + (np.cumsum(num_nodes) - num_nodes)[edge_graph]
        ids = np.arange(src.size, dtype=np.int64) - (np.cumsum(num_edges) - num_edges)[edge_graph]
    # Reverse steps first, so that after reversing the order the forward (and last) copy of a
    # step comes first and np.unique's first index picks it.
    keys = np.concatenate([dst * m + src, src * m + dst])[::-1]
    keys, first = np.unique(keys, return_index=True)
    u, v = np.divmod(keys, max(m, 1))
    keep = u != v
    u, v, eid = u[keep], v[keep], np.concatenate([ids, ids])[::-1][first[keep]]
    deg = np.bincount(u, minlength=m)
    slot = np.arange(u.size) - (np.cumsum(deg) - deg)[u]
    width = max(int(deg.max(initial=0)), 1)
    nbr = np.repeat(np.arange(m, dtype=np.int64)[:, None], width, axis=1)
    nbr[u, slot] = v
    nbr_edge = np.full((m, width), -1, dtype=np.int64)
    nbr_edge[u, slot] = eid
    return nbr, nbr_edge


def hop_distances(nbr: np.ndarray, num_nodes: np.ndarray) -> tuple[np.ndarray, int]:
    r"""Exact hop distances of all pairs of concatenated graphs, flat ``[P]`` in the pair order of
    :func:`shortest_paths_many`, from neighbour slots ``nbr [M, D]`` over global node ids (rows padded
    with the node itself), as uint8 (uint16 past distance 250); unreachable pairs hold the dtype's
    maximum. Also returns the largest finite distance.

    Breadth-first search from all sources of all graphs at once on bitsets: node :math:`u`'s ball of
    radius :math:`k` is a row of :math:`\lceil N_g / 64 \rceil` words over its own graph's nodes,
    and the ball of radius :math:`k + 1` is the OR of its neighbours' balls (and, at :math:`k = 0`,
    its own), so a level is two numpy calls on :math:`\sum_g N_g D \lceil N_g / 64 \rceil` words,
    not :math:`\sum_g N_g^2` work. Afterwards the binary digits of every distance are read off the
    balls and unpacked once.
    """
    m, width = nbr.shape
    one_size = _one_size(num_nodes)
    # Word w of node u's ball lies at word_off[u] + w; gather [D, words], contiguous: the OR-reduce
    # runs over its rows.
    if one_size:  # every ball has the same number of words: plain strides
        n = int(num_nodes[0])
        words = (n + 63) >> 6
        num_words = m * words
        local = np.arange(m) % n if num_nodes.size > 1 else np.arange(m)
        word_off = np.arange(0, num_words, words)
        gather = (nbr.T[:, :, None] * words + np.arange(words)).reshape(width, num_words)
    else:
        size = np.repeat(num_nodes, num_nodes)  # N_g of each node's graph
        local = np.arange(m) - np.repeat(np.cumsum(num_nodes) - num_nodes, num_nodes)
        word_count = (size + 63) >> 6
        word_off = np.cumsum(word_count) - word_count
        num_words = int(word_count.sum())
        word_node = np.repeat(np.arange(m), word_count)
        word_pos = np.arange(num_words) - word_off[word_node]
        gather = np.ascontiguousarray(word_off[nbr[word_node]].T + word_pos)
    # balls[r]: the balls of radius r (a diameter is below N_g; past 256 levels the stack grows by
    # doubling, so that a big graph does not reserve N_g levels for a whole chunk). The fixed point
    # is checked every 4 levels.
    balls = np.empty((min(int(num_nodes.max(initial=0)), 256) + 6, num_words), dtype=np.uint64)
    balls[0] = 0
    balls[0, word_off + (local >> 6)] = np.left_shift(np.uint64(1), (local & 63).astype(np.uint64))
    np.bitwise_or(balls[0], np.bitwise_or.reduce(balls[0][gather], axis=0), out=balls[1])
    k = 1
    while True:
        if k + 5 > len(balls):
            balls = np.concatenate([balls, np.empty_like(balls)])
        for _ in range(4):
            np.bitwise_or.reduce(balls[k][gather], axis=0, out=balls[k + 1])
            k += 1
        if not (balls[k] != balls[k - 4]).any():
            break
    # Drop the repeats: the radius of the first fixed level is the largest finite distance.
    while k > 0 and not (balls[k - 1] != balls[k]).any():
        k -= 1
    balls = balls[:k + 1]

    # Binary digits of d - 1, read off XORs of strided ball stacks: over the radii r = 0, 2^j,
    # 2 * 2^j, ... <= k, t lies in ball r of u for floor(k / 2^j) - ceil(d / 2^j) + 1 of them, and
    # for d >= 1 the parity of ceil(d / 2^j) is digit j of d - 1, flipped. (At d = 0 all digits
    # come out set: d - 1 wraps to the dtype's maximum, and back to 0 below.)
    num_bits = 8 if k <= 250 else 16
    digits = np.empty((num_bits, num_words), dtype=np.uint64)
    for j in range(num_bits):
        np.bitwise_xor.reduce(balls[::1 << j], axis=0, out=digits[j])
        if (k >> j) & 1:
            np.invert(digits[j], out=digits[j])
    # Unreachable pairs: d - 1 = the dtype's maximum - 1 (binary 11...10), so d is the maximum.
    digits[0] &= balls[k]
    digits[1:] |= ~balls[k]
    bits = np.unpackbits(digits.astype("<u8", copy=False).view(np.uint8), bitorder="little")
    # Each byte of `bits` is 0 or 1, so shifting whole 64-bit words by b < 8 moves every byte's
    # bit to place b without carrying into the next byte: 8 pairs per operation.
    bits = bits.reshape(num_bits, -1).view(np.uint64)
    # Bit b of node u's word w is the pair (u, 64 w + b), a pair of u's graph where 64 w + b < N_g;
    # the kept bits, in order, are the pairs row-major, graph after graph. (Where all graphs have
    # one size, e.g. a single graph, that is a column slice.)
    if one_size:
        def pairs_of(plane: np.ndarray) -> np.ndarray:
            return plane.reshape(m, -1)[:, :n]
    else:
        keep = (word_pos << 6)[:, None] + np.arange(64) < size[word_node][:, None]

        def pairs_of(plane: np.ndarray) -> np.ndarray:
            return plane.reshape(num_words, 64)[keep]
    planes = []
    for low in range(0, num_bits, 8):
        acc = bits[low].copy()
        for b in range(1, 8):
            acc |= bits[low + b] << np.uint64(b)
        planes.append(pairs_of(acc.view(np.uint8)))
    if num_bits == 8:
        dist = planes[0] + np.uint8(1)
    else:
        dist = (planes[0].astype(np.uint16) | (planes[1].astype(np.uint16) << 8)) + np.uint16(1)
    return dist.reshape(-1), k


def _one_size(num_nodes: np.ndarray) -> bool:
    """Whether all graphs have the same number of nodes (at least one): then the pairs form an
    ``[M, N]`` matrix, and whole rows can be sliced and gathered."""
    return num_nodes.size > 0 and num_nodes[0] > 0 and bool((num_nodes == num_nodes[0]).all())


def _next_steps(dist: np.ndarray, nbr: np.ndarray, nbr_edge: np.ndarray,
                num_nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""For every pair state (flat pair position of :math:`(u, t)`, see :func:`shortest_paths_many`):
    the state after one step towards :math:`t` (that of :math:`(v, t)`, ``[P]`` long) and the edge id
    taken (``[P]``, ``nbr_edge``'s dtype). The first neighbour slot one hop closer wins; finished and
    unreachable pairs stay put on edge :obj:`-1`."""
    m, width = nbr.shape
    closer = dist - 1  # wraps 0 to the unreachable marker, which no neighbour's distance equals
    choice = np.full(dist.size, width, dtype=np.uint8 if width < 255 else np.int64)  # width: stay
    edge = np.concatenate([nbr_edge, np.full((m, 1), -1, dtype=nbr_edge.dtype)], axis=1)
    if _one_size(num_nodes):
        # The pairs form an [M, N] matrix and pair (v, t) lies at v * N + t: whole rows are gathered,
        # and a step is a lookup of the row start by (u, slot) plus t.
        n = int(num_nodes[0])
        dist, closer, choice = (a.reshape(m, n) for a in (dist, closer, choice))
        for j in range(width - 1, -1, -1):
            np.copyto(choice, j, where=dist[nbr[:, j]] == closer)
        pick = np.arange(0, m * (width + 1), width + 1)[:, None] + choice
        row = np.concatenate([nbr, np.arange(m)[:, None]], axis=1) * n
        step_to = np.take(row, pick, mode="clip")
        step_to += np.arange(n)
        return step_to.reshape(-1), np.take(edge, pick, mode="clip").reshape(-1)
    size = np.repeat(num_nodes, num_nodes)
    local = np.arange(m) - np.repeat(np.cumsum(num_nodes) - num_nodes, num_nodes)
    # Pair (u, t) lies at row[u] + t, so a step to v moves pair state p to p + row[v] - row[u];
    # the last column (no step) stays put.
    row = np.repeat(np.cumsum(num_nodes * num_nodes) - num_nodes * num_nodes, num_nodes) + local * size
    shift = np.zeros((m, width + 1), dtype=np.int64)
    shift[:, :width] = row[nbr] - row[:, None]
    pairs = np.arange(dist.size)
    shift_cols = np.ascontiguousarray(shift.T)
    for j in range(width - 1, -1, -1):
        state = np.repeat(shift_cols[j], size)
        state += pairs
        np.copyto(choice, j, where=np.take(dist, state) == closer)
    pick = np.repeat(np.arange(0, m * (width + 1), width + 1), size)
    pick += choice
    step_to = np.take(shift, pick, mode="clip")
    step_to += pairs
    return step_to, np.take(edge, pick, mode="clip")

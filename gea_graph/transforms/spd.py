"""All-pairs shortest-path distances and paths (Graphormer's spatial and edge encodings)."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform


class ShortestPathDistance(BaseTransform):
    r"""All-pairs hop distances and the edges along one shortest path per pair, from the `"Do
    Transformers Really Perform Bad for Graph Representation?"
    <https://arxiv.org/abs/2106.05234>`_ paper.

    Distances are exact hop counts on the undirected graph underlying ``edge_index``, from a
    breadth-first search of all sources at once on bitsets (:func:`hop_distances`). Paths step
    from :math:`u` towards :math:`t` through the first neighbour :math:`v` (in ascending order)
    with :math:`d(v, t) = d(u, t) - 1`; the walk of all :math:`N^2` pairs is ``max_path``
    vectorised gathers. Everything is whole-array numpy with no loop over nodes or pairs: on
    molecule-sized graphs this is several times faster than one search per source in C (scipy's
    ``shortest_path``) followed by a predecessor read-out.

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
        n = int(data.num_nodes)
        ei = (data.edge_index.numpy() if data.edge_index is not None
              else np.zeros((2, 0), np.int64))
        nbr, nbr_edge = neighbour_slots(ei, n)
        dist = hop_distances(nbr)

        # Cap through a lookup table; the unreachable marker (the dtype's maximum) maps past it.
        marker = np.iinfo(dist.dtype).max
        cap = np.minimum(np.arange(marker + 1, dtype=np.int64), self.max_distance)
        cap[marker] = self.max_distance + 1
        spd = np.take(cap, dist).reshape(n * n)

        if self.max_path and ei.shape[1]:
            step_to, step_edge = _next_steps(dist, nbr, nbr_edge)
            path = np.empty((n * n, self.max_path), dtype=np.int64)
            path[:, 0] = step_edge
            state = step_to
            for step in range(1, self.max_path):
                path[:, step] = np.take(step_edge, state, mode="clip")
                if step + 1 < self.max_path:
                    state = np.take(step_to, state, mode="clip")
        else:
            path = np.full((n * n, self.max_path), -1, dtype=np.int64)

        nodes = np.arange(n, dtype=np.int64)
        index = np.empty((2, n, n), dtype=np.int64)
        index[0] = nodes[:, None]
        index[1] = nodes[None, :]
        data.spd_index = torch.from_numpy(index.reshape(2, n * n))
        data.spd = torch.from_numpy(spd)
        data.spd_path = torch.from_numpy(path)
        return data

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(max_distance={self.max_distance}, "
                f"max_path={self.max_path})")


def neighbour_slots(edge_index: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Undirected neighbour lists of ``edge_index`` as ``[N, D]`` slots (``D`` = max degree, at
    least 1; neighbours ascending, rows padded with the node itself, since a self step neither
    shortens a distance nor grows a ball) and the edge id of each slot's step ``[N, D]`` (padding
    :obj:`-1`). A step :math:`(u, v)` takes the id of a stored edge :math:`(u, v)`, else of the
    reverse :math:`(v, u)`; among duplicates the last one wins. Self-loops are dropped."""
    src, dst = edge_index
    ids = np.arange(src.size, dtype=np.int64)
    # Reverse steps first, so that after reversing the order the forward (and last) copy of a
    # step comes first and np.unique's first index picks it.
    keys = np.concatenate([dst * n + src, src * n + dst])[::-1]
    keys, first = np.unique(keys, return_index=True)
    u, v = np.divmod(keys, max(n, 1))
    keep = u != v
    u, v, eid = u[keep], v[keep], np.concatenate([ids, ids])[::-1][first[keep]]
    deg = np.bincount(u, minlength=n)
    slot = np.arange(u.size) - (np.cumsum(deg) - deg)[u]
    width = max(int(deg.max(initial=0)), 1)
    nbr = np.repeat(np.arange(n, dtype=np.int64)[:, None], width, axis=1)
    nbr[u, slot] = v
    nbr_edge = np.full((n, width), -1, dtype=np.int64)
    nbr_edge[u, slot] = eid
    return nbr, nbr_edge


def hop_distances(nbr: np.ndarray) -> np.ndarray:
    r"""Exact all-pairs hop distances ``[N, N]`` of the undirected graph given by neighbour slots
    ``nbr [N, D]`` (rows padded with the node itself), as uint8 (uint16 past distance 250);
    unreachable pairs hold the dtype's maximum.

    Breadth-first search from all sources at once on bitsets: node :math:`u`'s ball of radius
    :math:`k` is a row of :math:`\lceil N / 64 \rceil` words, and the ball of radius :math:`k + 1`
    is the OR of its neighbours' balls (and, at :math:`k = 0`, its own), so a level is two numpy
    calls on :math:`N D \lceil N / 64 \rceil` words, not :math:`N^2` work. Afterwards the binary
    digits of every distance are read off the balls and unpacked once.
    """
    n, width = nbr.shape
    words = (n + 63) // 64
    nodes = np.arange(n)
    # balls[k]: word w of node u's ball of radius k at u * words + w. A diameter is below N, and
    # the fixed point is checked every 4 levels (extra levels repeat it and cost little).
    balls = np.empty((n + 8, n * words), dtype=np.uint64)
    balls[0] = 0
    balls[0, nodes * words + (nodes >> 6)] = np.left_shift(np.uint64(1),
                                                           (nodes & 63).astype(np.uint64))
    gather = (nbr.T[:, :, None] * words + np.arange(words)).reshape(width, n * words)
    np.bitwise_or(balls[0], np.bitwise_or.reduce(balls[0][gather], axis=0), out=balls[1])
    k = 1
    while True:
        for _ in range(4):
            np.bitwise_or.reduce(balls[k][gather], axis=0, out=balls[k + 1])
            k += 1
        if not (balls[k] != balls[k - 4]).any():
            break

    # Binary digits of d - 1, read off XORs of strided ball stacks: over the radii r = 0, 2^j,
    # 2 * 2^j, ... < K, t lies in ball r of u for floor((K - 1) / 2^j) - ceil(d / 2^j) + 1 of
    # them, and for d >= 1 the parity of ceil(d / 2^j) is digit j of d - 1, flipped. (At d = 0 all
    # digits come out set: d - 1 wraps to the dtype's maximum, and back to 0 below.)
    num_bits = 8 if k <= 250 else 16
    count = k + 1
    digits = np.empty((num_bits, n * words), dtype=np.uint64)
    for j in range(num_bits):
        np.bitwise_xor.reduce(balls[:count:1 << j], axis=0, out=digits[j])
        if ((count - 1) >> j) & 1:
            np.invert(digits[j], out=digits[j])
    # Unreachable pairs: d - 1 = the dtype's maximum - 1 (binary 11...10), so d is the maximum.
    digits[0] &= balls[k]
    digits[1:] |= ~balls[k]
    bits = np.unpackbits(digits.astype("<u8", copy=False).view(np.uint8), bitorder="little")
    # Each byte of `bits` is 0 or 1, so shifting whole 64-bit words by b < 8 moves every byte's
    # bit to place b without carrying into the next byte: 8 pairs per operation.
    bits = bits.reshape(num_bits, -1).view(np.uint64)
    planes = []
    for low in range(0, num_bits, 8):
        acc = bits[low].copy()
        for b in range(1, 8):
            acc |= bits[low + b] << np.uint64(b)
        planes.append(acc.view(np.uint8).reshape(n, words * 64)[:, :n])
    if num_bits == 8:
        return planes[0] + np.uint8(1)
    return (planes[0].astype(np.uint16) | (planes[1].astype(np.uint16) << 8)) + np.uint16(1)


def _next_steps(dist: np.ndarray, nbr: np.ndarray,
                nbr_edge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""For every pair state ``u * N + t``: the state after one step towards :math:`t`
    (``v * N + t``, ``[N^2]`` long) and the edge id taken (``[N^2]`` int32). The first neighbour
    slot one hop closer wins; finished and unreachable pairs stay put on edge :obj:`-1`."""
    n, width = nbr.shape
    nodes = np.arange(n)
    closer = dist - 1  # wraps 0 to the unreachable marker, which no neighbour's distance equals
    choice = np.full((n, n), width, dtype=np.uint8 if width < 255 else np.int64)  # width: stay
    for j in range(width - 1, -1, -1):
        np.copyto(choice, j, where=dist[nbr[:, j]] == closer)
    pick = (nodes * (width + 1))[:, None] + choice
    to = np.concatenate([nbr, nodes[:, None]], axis=1) * n
    edge = np.concatenate([nbr_edge, np.full((n, 1), -1)], axis=1).astype(np.int32)
    step_to = np.take(to, pick, mode="clip")
    step_to += nodes[None, :]
    return step_to.reshape(n * n), np.take(edge, pick, mode="clip").reshape(n * n)

"""TreeNeighbourMatch (Alon & Yahav 2021), generated with numpy and stored without per-graph copies of the tree."""

from __future__ import annotations

import itertools
import math
import os
import os.path as osp
from collections.abc import Callable

import numpy as np
import torch
from torch_geometric.data import Data

from gea_graph.data.base import CachedDataset, CacheError, atomic_torch_save, load_cache
from gea_graph.data.config import PathLike
from gea_graph.transforms import apply_many

# Permutations drawn per depth for r >= 3: 4,000 x 2^r keys = 32,000 * 2^(r-3) graphs (GEAET Table 5).
PERMUTATIONS = 4000
# The deepest tree of the benchmark (GEAET Table 5); deeper ones need allow_large=True (r = 9 is about 8 GB).
MAX_DEPTH = 7
# Fields of the template graph that are not positional encodings.
_STRUCTURE = ("edge_index", "num_nodes")


def too_large(depth: int, how: str) -> str:
    r"""Why a tree deeper than :data:`MAX_DEPTH` is refused: its size, then :obj:`how` to build it anyway."""
    graphs, nodes = TreeNeighbourMatch.size(depth)
    return (f"tree depth {depth} makes {graphs:,} graphs of {nodes:,} nodes: about "
            f"{graphs * nodes * 4 / 2 ** 30:.1f} GiB on disk and more in memory while generating. The benchmark's "
            f"depths are 2..{MAX_DEPTH}; to build this one anyway {how}")


class TreeNeighbourMatch(CachedDataset):
    r"""Tree-NeighborsMatch from the `"On the Bottleneck of Graph Neural Networks and its Practical Implications"
    <https://arxiv.org/abs/2006.05205>`_ paper, sized as in GEAET's Table 5.

    Each graph is a complete binary tree of depth :math:`r`: :math:`N = 2^{r+1} - 1` nodes in heap order (node 0 is
    the root; the children of node :math:`i` are :math:`2i+1, 2i+2`; the :math:`2^r` leaves are the last nodes),
    with edges child -> parent only (:math:`N - 1` edges). Node features are ``x`` :math:`(N, 2)` long =
    ``(key, value)``:

    - leaf :math:`j` (node :math:`2^r - 1 + j`): key :math:`j`, value :math:`\pi(j)` for a permutation :math:`\pi`
      of :math:`0, \ldots, 2^r - 1`;
    - the root: key = the query :math:`q`, value = :attr:`none_index`;
    - inner nodes: both :attr:`none_index`.

    :attr:`none_index` :math:`= 2^r` is the "none" sentinel, so each column embeds with ``Embedding(2^r + 1, d)``.
    The label ``y`` :math:`(1)` long is :math:`\pi(q)`, one of :math:`2^r` classes, read out at the root:
    ``target_mask`` :math:`(N)` bool is True only at node 0.

    Sizes: for :math:`r = 2` all :math:`4! \cdot 4 = 96` (permutation, query) pairs; for :math:`r \ge 3`,
    4,000 seeded random permutations (distinct for :math:`r = 3`) times all :math:`2^r` queries, i.e.
    :math:`32{,}000 \cdot 2^{r-3}` graphs. Split 80/20 (``train`` / ``test``), stratified by label and seeded.

    Storage: every graph shares one tree, so a split stores only the keys and values (``int16``, 0.5 GB for
    :math:`r = 7`'s 512,000 graphs) and the labels; :meth:`get` assembles each graph around the shared template
    ``edge_index`` and ``target_mask``. A ``pre_transform`` (e.g. positional encodings) therefore runs once, on the
    template structure (``edge_index``, ``num_nodes``; it never sees ``x``), and its output fields are shared by
    every graph. ``pre_filter`` is not supported.

    Args:
        root (str, optional): Data root.
        depth (int): Tree depth :math:`r \ge 2`.
        split (str): ``"train"`` or ``"test"``. (default: :obj:`"train"`)
        seed (int, optional): Seed of the permutations and the split. (default: :obj:`0`)
        transform, pre_transform, pe, force_reload: see :class:`~gea_graph.data.base.CachedDataset`.
        allow_large (bool, optional): Allow depths beyond :data:`MAX_DEPTH` (the size grows as :math:`4^r`:
            about 2 GB for :math:`r = 8`, 8 GB for :math:`r = 9`); without it such a depth raises a
            :class:`ValueError` stating the size. (default: :obj:`False`)
    """

    splits = ("train", "test")

    def __init__(self, root: PathLike | None = None, depth: int = 2, split: str = "train", seed: int = 0,
                 transform: Callable | None = None, pre_transform: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False, allow_large: bool = False) -> None:
        if depth < 2:
            raise ValueError(f"TreeNeighbourMatch needs depth >= 2 (the benchmark's depths are 2..{MAX_DEPTH}), "
                             f"got {depth}")
        if depth > MAX_DEPTH and not allow_large:
            raise ValueError(too_large(depth, f"pass allow_large=True (gea-graph data prepare tree --depth {depth} "
                                              f"--allow-large)"))
        self.depth = depth
        self.seed = seed
        self.folder = f"tree-r{depth}"
        super().__init__(root, split, transform, pre_transform, None, pe, force_reload)

    @staticmethod
    def size(depth: int) -> tuple[int, int]:
        """``(graphs, nodes per graph)`` of depth :math:`r`."""
        leaves = 2 ** depth
        perms = math.factorial(leaves) if depth == 2 or math.factorial(leaves) <= PERMUTATIONS else PERMUTATIONS
        return perms * leaves, 2 * leaves - 1

    @property
    def none_index(self) -> int:
        """The "none" sentinel of both feature columns (:math:`2^r`)."""
        return 2 ** self.depth

    @property
    def num_classes(self) -> int:
        return 2 ** self.depth

    def cache_extra(self) -> str:
        return f"seed={self.seed}"

    @property
    def raw_file_names(self) -> list[str]:
        return []

    def download(self) -> None:  # generated, nothing to fetch
        pass

    # -- generation -----------------------------------------------------------------------------------------------
    def template(self) -> Data:
        """The shared tree: ``edge_index`` (child -> parent) and ``target_mask``."""
        num_nodes = 2 ** (self.depth + 1) - 1
        child = torch.arange(1, num_nodes)
        target_mask = torch.zeros(num_nodes, dtype=torch.bool)
        target_mask[0] = True
        return Data(edge_index=torch.stack([child, (child - 1) // 2]), target_mask=target_mask, num_nodes=num_nodes)

    def generate(self) -> dict[str, np.ndarray]:
        """All graphs as arrays: ``x`` ``[G, N, 2] int16`` and ``y`` ``[G] int64``, plus the seeded split."""
        rng = np.random.default_rng(self.seed)
        leaves = 2 ** self.depth
        num_nodes = 2 * leaves - 1
        if self.depth == 2 or math.factorial(leaves) <= PERMUTATIONS:
            perms = np.array(list(itertools.permutations(range(leaves))), dtype=np.int16)
        elif self.depth == 3:
            every = np.array(list(itertools.permutations(range(leaves))), dtype=np.int16)
            perms = every[rng.choice(len(every), PERMUTATIONS, replace=False)]
        else:
            perms = rng.permuted(np.tile(np.arange(leaves, dtype=np.int16), (PERMUTATIONS, 1)), axis=1)
        # Graph g pairs permutation g // leaves with query g % leaves.
        values = np.repeat(perms, leaves, axis=0)
        query = np.tile(np.arange(leaves, dtype=np.int16), len(perms))
        x = np.full((len(values), num_nodes, 2), self.none_index, dtype=np.int16)
        x[:, leaves - 1:, 0] = np.arange(leaves, dtype=np.int16)
        x[:, leaves - 1:, 1] = values
        x[:, 0, 0] = query
        y = values[np.arange(len(values)), query].astype(np.int64)

        train = []
        for label in range(leaves):
            members = rng.permutation(np.flatnonzero(y == label))
            train.append(members[:round(0.8 * len(members))])
        is_train = np.zeros(len(y), dtype=bool)
        is_train[np.concatenate(train)] = True
        order = rng.permutation(len(y))
        return {"x": x, "y": y, "train": order[is_train[order]], "test": order[~is_train[order]]}

    def process(self) -> None:
        arrays = self.generate()
        template = apply_many(self.pre_transform, [self.template()])[0]
        shared = {key: value for key, value in template.to_dict().items() if key not in _STRUCTURE}
        os.makedirs(self.processed_dir, exist_ok=True)
        for split in self.splits:
            index = arrays[split]
            atomic_torch_save({"x": torch.from_numpy(arrays["x"][index]), "y": torch.from_numpy(arrays["y"][index]),
                               "shared": shared}, osp.join(self.processed_dir, f"{split}.pt"))

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{split}.pt" for split in self.splits]

    # -- access ---------------------------------------------------------------------------------------------------
    def open(self) -> None:
        """Reads this split (compact: one shared tree, ``x`` and ``y`` of every graph)."""
        path = osp.join(self.processed_dir, f"{self.split}.pt")
        stored = load_cache(path)
        if not (isinstance(stored, dict) and {"x", "y", "shared"} <= set(stored)):
            raise CacheError(f"cannot read the cached file {path}: it is not a tree split of this toolkit. Delete "
                             f"{osp.dirname(path)} and run again to rebuild it.")
        self._x, self._y = stored["x"], stored["y"]
        template = self.template()
        self._edge_index = template.edge_index
        self._shared = {"target_mask": template.target_mask, **stored["shared"]}

    def len(self) -> int:
        return self._y.numel()

    def get(self, idx: int) -> Data:
        return Data(x=self._x[idx].long(), edge_index=self._edge_index, y=self._y[idx:idx + 1],
                    num_nodes=self._x.shape[1], **self._shared)

    @property
    def y(self) -> torch.Tensor:
        """The labels of the graphs in this (possibly sliced) dataset, ``[G] long``."""
        return self._y if self._indices is None else self._y[torch.as_tensor(self.indices())]

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(depth={self.depth}, split={self.split!r}, {len(self)})"

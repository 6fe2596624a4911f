"""PCQM-Contact, PascalVOC-SP and COCO-SP: PyG's :class:`~torch_geometric.datasets.LRGBDataset` with our raw-file
handling (mirror, MD5 where published, safe loading, atomic keyed caches)."""

from __future__ import annotations

import os
import os.path as osp
from collections.abc import Callable, Sequence

import torch
from torch_geometric.data import Data
from torch_geometric.datasets import LRGBDataset

from gea_graph.data import safe_pickle
from gea_graph.data.base import CachedDataset
from gea_graph.data.config import PathLike
from gea_graph.data.download import RawFile, fetch
from gea_graph.io import ensure_folder, extracted_zip, move_into


class _LRGB(CachedDataset):
    """Reuses :class:`~torch_geometric.datasets.LRGBDataset`'s names, URLs, raw layout
    (``root/<name>/raw/{train,val,test}.{pt,pickle}``) and COCO label map. Ours: ``download`` (mirror first, temp-name
    + rename), the reading of the raw splits (PyG reads the superpixel pickles with a bare ``pickle.load`` and falls
    back to ``torch.load(weights_only=False)``; we use :mod:`gea_graph.data.safe_pickle` and ``weights_only=True``),
    and the processed store of :class:`~gea_graph.data.base.CachedDataset` (keyed by the pre-transform, memory-mapped,
    built atomically).

    LRGB publishes no checksums for these archives, so they are used unchecked (with a warning).
    """

    lrgb_name: str = ""
    splits = ("train", "val", "test")

    def __init__(self, root: PathLike | None = None, split: str = "train", transform: Callable | None = None,
                 pre_transform: Callable | None = None, pre_filter: Callable | None = None,
                 pe: str | None = None, force_reload: bool = False) -> None:
        self.name = self.lrgb_name
        self.folder = self.lrgb_name
        super().__init__(root, split, transform, pre_transform, pre_filter, pe, force_reload)

    @property
    def archive(self) -> RawFile:
        url = LRGBDataset.urls[self.name]
        return RawFile(url.rsplit("/", 1)[-1].split("?")[0], url, None, self.name)

    @property
    def raw_file_names(self) -> list[str]:
        suffix = "pickle" if self.name.endswith("-sp") else "pt"
        return [f"{split}.{suffix}" for split in self.splits]

    def download(self) -> None:
        archive = fetch(self.archive, self.root)
        with extracted_zip(archive, self.root) as tmp:
            ensure_folder(osp.dirname(self.raw_dir))
            move_into(osp.join(tmp, LRGBDataset.dwnld_file_name[self.name]), self.raw_dir)
        os.unlink(archive)

    def read_split(self, split: str) -> list[tuple]:
        """The raw graphs of one split, as LRGB stores them (tuples of tensors)."""
        if self.name.endswith("-sp"):
            return safe_pickle.load(osp.join(self.raw_dir, f"{split}.pickle"), allow_torch_tensors=True)
        return torch.load(osp.join(self.raw_dir, f"{split}.pt"), weights_only=True)

    def to_data(self, graph: Sequence) -> Data:
        raise NotImplementedError

    def build(self) -> dict[str, list[Data]]:
        return {split: [self.to_data(g) for g in self.read_split(split)] for split in self.splits}


class PCQMContact(_LRGB):
    r"""PCQM-Contact from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: 529,434 molecules,
    inductive link prediction of 3D contacts (MRR).

    Graphs have OGB features (``x`` :math:`(N, 9)`, ``edge_attr`` :math:`(E, 3)` long) and LRGB's link targets:
    ``edge_label_index`` :math:`(2, E_{label})` long (node pairs; it contains ``index``, so batching offsets it) and
    ``edge_label`` :math:`(E_{label})` (1 = contact, 0 = negative pair). No ``y``.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    lrgb_name = "pcqm-contact"

    def to_data(self, graph: Sequence) -> Data:
        x, edge_attr, edge_index, edge_label_index, edge_label = graph
        return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, edge_label_index=edge_label_index,
                    edge_label=edge_label)


class _Superpixels(_LRGB):
    _remap: torch.Tensor | None = None

    def _coco_remap(self) -> torch.Tensor:
        """PyG's COCO label map as a look-up tensor (original category id -> 0..80)."""
        if self._remap is None:
            table = LRGBDataset.label_remap_coco(self)
            self._remap = torch.full((max(table) + 1,), -1, dtype=torch.long)
            for original, new in table.items():
                self._remap[original] = new
        return self._remap

    def to_data(self, graph: Sequence) -> Data:
        x, edge_attr, edge_index, y = graph
        y = torch.as_tensor(y, dtype=torch.long)
        if self.name == "coco-sp":
            y = self._coco_remap()[y]
        return Data(x=torch.as_tensor(x).float(), edge_index=torch.as_tensor(edge_index),
                    edge_attr=torch.as_tensor(edge_attr).float(), y=y)


class PascalVOCSP(_Superpixels):
    r"""PascalVOC-SP from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: 11,355 superpixel
    graphs, 21-class node classification (macro F1).

    ``x`` :math:`(N, 14)` float (RGB statistics and position), ``edge_attr`` :math:`(E, 2)` float, ``y`` :math:`(N)`
    long.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    lrgb_name = "pascalvoc-sp"


class COCOSP(_Superpixels):
    r"""COCO-SP from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: 123,286 superpixel
    graphs, 81-class node classification (macro F1). COCO's non-contiguous category ids are mapped to 0..80 with
    PyG's ``label_remap_coco``.

    ``x`` :math:`(N, 14)` float, ``edge_attr`` :math:`(E, 2)` float, ``y`` :math:`(N)` long.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    lrgb_name = "coco-sp"

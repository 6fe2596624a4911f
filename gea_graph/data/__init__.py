"""Datasets, raw-file fetching (mirror, download, MD5), safe unpickling and atomic caches.

Registry (for the training code and the ``gea-graph data`` command)::

    get_dataset(name: str, root: str | None = None, split: str = "train", pe: str | None = None,
                transform=None, pre_transform=None, **kwargs) -> torch_geometric.data.Dataset

- ``name``: a key of :data:`DATASETS` (``zinc``, ``peptides-func``, ``peptides-struct``, ``pcqm4m``, ``pcqm4mv2``,
  ``pcqm-contact``, ``pascalvoc-sp``, ``coco-sp``, ``tree-r2`` ... ``tree-r7``), or ``tree`` with ``depth=``.
- ``root``: data root (default ``$GEA_GRAPH_DATA``, else ``./datasets``).
- ``split``: one of ``DATASETS[name].splits`` (``train``/``val``/``test`` for most; ``train``/``test`` for the
  trees; ``train``/``val``/``test-dev``/``test-challenge`` for PCQM4Mv2, whose last two are unlabelled; PCQM4M's
  ``test`` is unlabelled too).
- ``pe``: positional encodings computed once as ``pre_transform`` and cached, e.g. ``"lap:8,rw:20"`` or
  ``"lap:8,rw:20,spd:20"`` (:func:`gea_graph.transforms.parse_pe`).
- ``kwargs`` go to the dataset class (e.g. ``skip_invalid=True`` for molecules, ``seed=`` for trees,
  ``allow_large=True`` for a tree deeper than 7).

Processed caches are read back only with :func:`load_cache` (``weights_only=True`` and our allow-list, no unsafe
fallback): a cache that fails to load raises :class:`CacheError` naming the file, and is never executed.

Each :class:`DatasetInfo` in :data:`DATASETS` also records the task, metric, number of classes / targets and the
public source. Fields of the graphs are fixed by ``docs/design.md`` (data schema).
"""

from __future__ import annotations

import os.path as osp
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch_geometric.data import Dataset

from gea_graph.data.base import CachedDataset, CacheError, atomic_torch_save, cache_key, load_cache
from gea_graph.data.config import PathLike, data_root, mirror_root
from gea_graph.data.download import RawFile, RawFileError, check_gzip, fetch, md5sum
from gea_graph.data.loader import GraphLoader
from gea_graph.data.lrgb import COCOSP, PascalVOCSP, PCQMContact
from gea_graph.data.molecules import (
    PCQM4M,
    ZINC,
    InvalidSmilesError,
    MoleculeCSV,
    PCQM4Mv2,
    PeptidesFunctional,
    PeptidesStructural,
    UnknownAtomTypeError,
)
from gea_graph.data.safe_pickle import UnsafePickleError
from gea_graph.data.store import GraphStore, StoreError, build_store
from gea_graph.data.tree import TreeNeighbourMatch


@dataclass(frozen=True)
class DatasetInfo:
    """A registry entry: the class, its fixed arguments and what the dataset is."""

    cls: type[Dataset]
    task: str
    metric: str
    source: str
    folder: str
    splits: tuple[str, ...] = ("train", "val", "test")
    num_outputs: int = 1
    mirror_dir: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: what differs from the papers' version of the dataset (printed under result tables), if anything
    caveat: str | None = None
    #: the dataset options (keyword arguments) under which :attr:`caveat` applies; ``None``: always
    caveat_options: dict[str, Any] | None = None

    def caveat_for(self, options: Mapping[str, Any]) -> str | None:
        """The caveat of a run that reads this dataset with keyword arguments :obj:`options`, or :obj:`None`."""
        if self.caveat is None or (self.caveat_options is not None
                                   and any(options.get(k) != v for k, v in self.caveat_options.items())):
            return None
        return self.caveat


_LRGB_SOURCE = "LRGB (Dwivedi et al. 2022), Dropbox files of PyG's LRGBDataset"

DATASETS: dict[str, DatasetInfo] = {
    "zinc": DatasetInfo(ZINC, "graph regression", "MAE", "datamol-io/graphium ZINC_bench_gnn (Benchmarking GNNs)",
                        "zinc", mirror_dir="zinc-subset",
                        caveat="These recipes read ZINC with `features: ogb` (OGB's 9 atom / 3 bond features); the "
                        "papers use the Benchmarking-GNNs encoding (28 atom types, 4 bond types; our default, "
                        "`features: bench`). The richer input makes the task easier, so their paper column is a "
                        "reference point, not a like-for-like comparison.", caveat_options={"features": "ogb"}),
    "peptides-func": DatasetInfo(PeptidesFunctional, "10-task multi-label graph classification", "AP",
                                 _LRGB_SOURCE, "peptides-func", num_outputs=10, mirror_dir="peptides-func"),
    "peptides-struct": DatasetInfo(PeptidesStructural, "11-target graph regression", "MAE", _LRGB_SOURCE,
                                   "peptides-struct", num_outputs=11, mirror_dir="peptides-struct"),
    # Only the labelled splits: training then reads OGB's valid split as the test split too (the published PCQM4M
    # numbers are valid MAEs); PCQM4M(split="test") still gives the hidden-label test graphs.
    "pcqm4m": DatasetInfo(PCQM4M, "graph regression (HOMO-LUMO gap)", "MAE",
                          "OGB-LSC 2021 pcqm4m_kddcup2021.zip", "pcqm4m_kddcup2021", splits=("train", "val"),
                          mirror_dir="pcqm4m"),
    "pcqm4mv2": DatasetInfo(PCQM4Mv2, "graph regression (HOMO-LUMO gap)", "MAE", "OGB-LSC pcqm4m-v2.zip",
                            "pcqm4m-v2", splits=PCQM4Mv2.splits, mirror_dir="pcqm4mv2"),
    "pcqm-contact": DatasetInfo(PCQMContact, "inductive link prediction", "MRR", _LRGB_SOURCE, "pcqm-contact",
                                mirror_dir="pcqm-contact"),
    "pascalvoc-sp": DatasetInfo(PascalVOCSP, "node classification (21 classes)", "macro F1", _LRGB_SOURCE,
                                "pascalvoc-sp", num_outputs=21, mirror_dir="pascalvoc-sp"),
    "coco-sp": DatasetInfo(COCOSP, "node classification (81 classes)", "macro F1", _LRGB_SOURCE, "coco-sp",
                           num_outputs=81, mirror_dir="coco-sp"),
}
for _depth in range(2, 8):
    DATASETS[f"tree-r{_depth}"] = DatasetInfo(
        TreeNeighbourMatch, f"root classification ({2 ** _depth} classes)", "accuracy",
        "generated (Alon & Yahav 2021), seeded", f"tree-r{_depth}", splits=("train", "test"),
        num_outputs=2 ** _depth, kwargs={"depth": _depth})


def get_dataset(name: str, root: PathLike | None = None, split: str = "train", pe: str | None = None,
                transform: Callable | None = None, pre_transform: Callable | None = None,
                **kwargs: Any) -> Dataset:
    """Builds (once, then from cache) and returns one split of a registered dataset; see the module docstring."""
    key = name.lower()
    if key == "tree":
        if "depth" not in kwargs:
            raise ValueError("dataset 'tree' needs depth=<r> (or use the names tree-r2 ... tree-r7)")
        key = f"tree-r{kwargs['depth']}"
        if key not in DATASETS:
            return TreeNeighbourMatch(root, split=split, pe=pe, transform=transform, pre_transform=pre_transform,
                                      **kwargs)
    if key not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)} (or 'tree' with depth=)")
    info = DATASETS[key]
    return info.cls(root, split=split, pe=pe, transform=transform, pre_transform=pre_transform,
                    **{**info.kwargs, **kwargs})


def availability(name: str, root: PathLike | None = None) -> str:
    """Where a dataset would come from now: ``processed`` (a cache exists), ``raw`` (raw files are in the data root),
    ``mirror`` (in ``$GEA_GRAPH_MIRROR``), ``generated`` (trees) or ``download``."""
    info = DATASETS[name]
    folder = osp.join(str(data_root(root)), info.folder)
    if osp.isdir(osp.join(folder, "processed")):
        return "processed"
    if info.cls is TreeNeighbourMatch:
        return "generated"
    if osp.isdir(osp.join(folder, "raw")):
        return "raw"
    mirror = mirror_root()
    if mirror is not None and info.mirror_dir is not None and osp.isdir(osp.join(mirror, info.mirror_dir)):
        return "mirror"
    return "download"


__all__ = [
    "COCOSP",
    "DATASETS",
    "PCQM4M",
    "ZINC",
    "CacheError",
    "CachedDataset",
    "DatasetInfo",
    "GraphLoader",
    "GraphStore",
    "InvalidSmilesError",
    "MoleculeCSV",
    "PCQM4Mv2",
    "PCQMContact",
    "PascalVOCSP",
    "PeptidesFunctional",
    "PeptidesStructural",
    "RawFile",
    "RawFileError",
    "StoreError",
    "TreeNeighbourMatch",
    "UnknownAtomTypeError",
    "UnsafePickleError",
    "atomic_torch_save",
    "availability",
    "build_store",
    "cache_key",
    "check_gzip",
    "data_root",
    "fetch",
    "get_dataset",
    "load_cache",
    "md5sum",
    "mirror_root",
]

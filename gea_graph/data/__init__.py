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

Featurisation (atoms, bonds and molecules to integer columns; SMILES rows to graphs with their PEs) lives in
:mod:`gea_graph.data.featurizers`, the record a checkpoint keeps of it in :mod:`gea_graph.data.featurizer`, bounded
CSV reading in :mod:`gea_graph.data.csv_files`, one module per dataset family (``zinc``, ``peptides``, ``pcqm4m``,
``molecule_csv``, ``lrgb``, ``tree``). Every molecule meets :class:`SizeBounds` (1,000 atoms, 20,000 directed edges,
10,000 SMILES characters by default; dataset options ``max_nodes`` / ``max_edges``) before RDKit or a positional
encoding sees it.

Processed caches are read back only with :func:`load_cache` (``weights_only=True`` and our allow-list, no unsafe
fallback): a cache that fails to load raises :class:`CacheError` naming the file, and is never executed.

Each :class:`DatasetInfo` in :data:`DATASETS` also records the task, metric, number of classes / targets and the
public source. Fields of the graphs are fixed by ``docs/design.md`` (data schema).
"""

from __future__ import annotations

from gea_graph.data.cards import DATASETS, DatasetInfo, availability, get_dataset
from gea_graph.data.config import data_root, mirror_root
from gea_graph.lazy import lazy_exports

#: Public name -> the module of this package that defines it: imported on first use, so that the cards
#: (:data:`DATASETS`, ``gea-graph data list``) import neither PyG nor RDKit.
_WHERE = {
    "CachedDataset": "base", "CacheError": "base", "atomic_torch_save": "base", "cache_key": "base",
    "load_cache": "base", "RawFile": "download", "RawFileError": "download", "check_gzip": "download",
    "fetch": "download", "md5sum": "download", "Featurizer": "featurizer", "FeaturizerError": "featurizer",
    "FEATURE_WIDTHS": "featurizers", "InvalidSmilesError": "featurizers", "SizeBounds": "featurizers",
    "UnknownAtomTypeError": "featurizers", "GraphLoader": "loader", "DeviceLoader": "device", "DeviceSplit": "device",
    "COCOSP": "lrgb", "PascalVOCSP": "lrgb",
    "PCQMContact": "lrgb", "MoleculeCSV": "molecule_csv", "PCQM4M": "pcqm4m", "PCQM4Mv2": "pcqm4m",
    "PeptidesFunctional": "peptides", "PeptidesStructural": "peptides", "UnsafePickleError": "safe_pickle",
    "GraphStore": "store", "StoreError": "store", "build_store": "store", "TreeNeighbourMatch": "tree", "ZINC": "zinc",
}

__all__ = [
    "COCOSP",
    "DATASETS",
    "FEATURE_WIDTHS",
    "PCQM4M",
    "ZINC",
    "CacheError",
    "CachedDataset",
    "DatasetInfo",
    "DeviceLoader",
    "DeviceSplit",
    "Featurizer",
    "FeaturizerError",
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
    "SizeBounds",
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


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

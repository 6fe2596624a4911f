r"""The dataset cards: :data:`DATASETS` (name -> :class:`DatasetInfo`: task, metric, splits, outputs, source, where
the raw files come from), :func:`get_dataset` and :func:`availability`.

A card names its dataset class by its import path; the class (and with it PyG, RDKit and OGB) is imported only when a
dataset is built (:attr:`DatasetInfo.cls`), so that listing datasets or checking a name imports nothing heavy.
"""

from __future__ import annotations

import importlib
import os.path as osp
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gea_graph.data.config import PathLike, data_root, mirror_root

if TYPE_CHECKING:
    from torch_geometric.data import Dataset

#: The class of the generated TreeNeighbourMatch datasets (any depth: ``get_dataset("tree", depth=r)``).
TREE_CLASS = "gea_graph.data.tree.TreeNeighbourMatch"


@dataclass(frozen=True)
class DatasetInfo:
    """A registry entry: the dataset class, its fixed arguments and what the dataset is."""

    #: the dataset class, by import path (``"gea_graph.data.zinc.ZINC"``): imported when first used (:attr:`cls`)
    class_path: str
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
    #: what the model's outputs are called (the card's target columns, labels or classes, in output order): the
    #: column names of ``gea-graph predict``
    target_names: tuple[str, ...] = ()

    @property
    def cls(self) -> type[Dataset]:
        """The dataset class (imported on first use)."""
        module, _, name = self.class_path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def caveat_for(self, options: Mapping[str, Any]) -> str | None:
        """The caveat of a run that reads this dataset with keyword arguments :obj:`options`, or :obj:`None`."""
        if self.caveat is None or (self.caveat_options is not None
                                   and any(options.get(k) != v for k, v in self.caveat_options.items())):
            return None
        return self.caveat


_LRGB_SOURCE = "LRGB (Dwivedi et al. 2022), Dropbox files of PyG's LRGBDataset"
#: LRGB's order of the Peptides-func labels (its dataset docstring)
PEPTIDES_FUNC_LABELS = ("antifungal", "cell_cell_communication", "anticancer", "drug_delivery_vehicle",
                        "antimicrobial", "antiviral", "antihypertensive", "antibacterial", "antiparasitic", "toxic")
#: LRGB's Peptides-struct targets: the columns of its standardised file, in output order
PEPTIDES_STRUCT_TARGETS = ("Inertia_mass_a", "Inertia_mass_b", "Inertia_mass_c", "Inertia_valence_a",
                           "Inertia_valence_b", "Inertia_valence_c", "length_a", "length_b", "length_c", "Spherocity",
                           "Plane_best_fit")
#: PCQM4Mv2's splits (OGB's ``valid`` is ``val``; the two test splits have no public labels)
PCQM4MV2_SPLITS = ("train", "val", "test-dev", "test-challenge")
#: The 21 PASCAL VOC segmentation classes, in label order
VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")
#: COCO-SP's 81 classes: label i is COCO category ``LRGBDataset.label_remap_coco``'s i-th id (0: background)
COCO_CLASSES = ("background", *(f"category_{i}" for i in (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35,
    36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
    65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)))

DATASETS: dict[str, DatasetInfo] = {
    "zinc": DatasetInfo(
        "gea_graph.data.zinc.ZINC", "graph regression", "MAE", "datamol-io/graphium ZINC_bench_gnn (Benchmarking GNNs)",
        "zinc", mirror_dir="zinc-subset",
        caveat="These recipes read ZINC with `features: ogb` (OGB's 9 atom / 3 bond features); the papers use the "
        "Benchmarking-GNNs encoding (28 atom types, 4 bond types; our default, `features: bench`). The richer input "
        "makes the task easier, so their paper column is a reference point, not a like-for-like comparison.",
        caveat_options={"features": "ogb"}, target_names=("score",)),
    "peptides-func": DatasetInfo(
        "gea_graph.data.peptides.PeptidesFunctional", "10-task multi-label graph classification", "AP", _LRGB_SOURCE,
        "peptides-func", num_outputs=10, mirror_dir="peptides-func", target_names=PEPTIDES_FUNC_LABELS),
    "peptides-struct": DatasetInfo(
        "gea_graph.data.peptides.PeptidesStructural", "11-target graph regression", "MAE", _LRGB_SOURCE,
        "peptides-struct", num_outputs=11, mirror_dir="peptides-struct", target_names=PEPTIDES_STRUCT_TARGETS),
    # Only the labelled splits: training then reads OGB's valid split as the test split too (the published PCQM4M
    # numbers are valid MAEs); PCQM4M(split="test") still gives the hidden-label test graphs.
    "pcqm4m": DatasetInfo(
        "gea_graph.data.pcqm4m.PCQM4M", "graph regression (HOMO-LUMO gap)", "MAE", "OGB-LSC 2021 pcqm4m_kddcup2021.zip",
        "pcqm4m_kddcup2021", splits=("train", "val"), mirror_dir="pcqm4m", target_names=("homolumogap",)),
    "pcqm4mv2": DatasetInfo(
        "gea_graph.data.pcqm4m.PCQM4Mv2", "graph regression (HOMO-LUMO gap)", "MAE", "OGB-LSC pcqm4m-v2.zip",
        "pcqm4m-v2", splits=PCQM4MV2_SPLITS, mirror_dir="pcqm4mv2", target_names=("homolumogap",)),
    "pcqm-contact": DatasetInfo(
        "gea_graph.data.lrgb.PCQMContact", "inductive link prediction", "MRR", _LRGB_SOURCE, "pcqm-contact",
        mirror_dir="pcqm-contact"),
    "pascalvoc-sp": DatasetInfo(
        "gea_graph.data.lrgb.PascalVOCSP", "node classification (21 classes)", "macro F1", _LRGB_SOURCE,
        "pascalvoc-sp", num_outputs=21, mirror_dir="pascalvoc-sp", target_names=VOC_CLASSES),
    "coco-sp": DatasetInfo(
        "gea_graph.data.lrgb.COCOSP", "node classification (81 classes)", "macro F1", _LRGB_SOURCE, "coco-sp",
        num_outputs=81, mirror_dir="coco-sp", target_names=COCO_CLASSES),
}
for _depth in range(2, 8):
    DATASETS[f"tree-r{_depth}"] = DatasetInfo(
        TREE_CLASS, f"root classification ({2 ** _depth} classes)", "accuracy",
        "generated (Alon & Yahav 2021), seeded", f"tree-r{_depth}", splits=("train", "test"),
        num_outputs=2 ** _depth, kwargs={"depth": _depth}, target_names=tuple(f"class_{c}" for c in range(2 ** _depth)))


def get_dataset(name: str, root: PathLike | None = None, split: str = "train", pe: str | None = None,
                transform: Callable | None = None, pre_transform: Callable | None = None,
                **kwargs: Any) -> Dataset:
    """Builds (once, then from cache) and returns one split of a registered dataset; see :mod:`gea_graph.data`."""
    key = name.lower()
    if key == "tree":
        if "depth" not in kwargs:
            raise ValueError("dataset 'tree' needs depth=<r> (or use the names tree-r2 ... tree-r7)")
        key = f"tree-r{kwargs['depth']}"
        if key not in DATASETS:
            from gea_graph.data.tree import TreeNeighbourMatch

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
    if info.class_path == TREE_CLASS:
        return "generated"
    if osp.isdir(osp.join(folder, "raw")):
        return "raw"
    mirror = mirror_root()
    if mirror is not None and info.mirror_dir is not None and osp.isdir(osp.join(mirror, info.mirror_dir)):
        return "mirror"
    return "download"

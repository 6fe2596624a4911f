r"""Peptides-func and Peptides-struct from the Long Range Graph Benchmark, built from their SMILES."""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd

from gea_graph.data import safe_pickle
from gea_graph.data.cards import PEPTIDES_STRUCT_TARGETS
from gea_graph.data.download import RawFile, check_gzip
from gea_graph.data.molecules import MoleculeSource, _MoleculeDataset

LRGB_PEPTIDES = "https://www.dropbox.com/s"


class _Peptides(_MoleculeDataset):
    csv_file: RawFile
    split_file: RawFile

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def source(self) -> MoleculeSource:
        path = self.raw_path(self.csv_file.name)
        check_gzip(path)
        table = pd.read_csv(path)
        split_path = self.raw_path(self.split_file.name)
        index = safe_pickle.load(split_path)
        return MoleculeSource(table["smiles"].tolist(), self.targets(table), path,
                              {split: np.asarray(index[split], dtype=np.int64) for split in self.splits},
                              files=(path, split_path))


class PeptidesFunctional(_Peptides):
    r"""Peptides-func from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: 15,535 peptides,
    10-way multi-label classification (average precision).

    Target ``y`` :math:`(1, 10)` float (0/1). Split 10,873 / 2,331 / 2,331 from LRGB's stratified split pickle,
    read with :mod:`gea_graph.data.safe_pickle`.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "peptides-func"
    csv_file = RawFile("peptide_multi_class_dataset.csv.gz",
                       f"{LRGB_PEPTIDES}/ol2v01usvaxbsr8/peptide_multi_class_dataset.csv.gz?dl=1",
                       "701eb743e899f4d793f0e13c8fa5a1b4", "peptides-func")
    split_file = RawFile("splits_random_stratified_peptide.pickle",
                         f"{LRGB_PEPTIDES}/j4zcnx2eipuo0xz/splits_random_stratified_peptide.pickle?dl=1",
                         "5a0114bdadc80b94fc7ae974f13ef061", "peptides-func")
    raw_files = (csv_file, split_file)

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        # The labels column holds Python list literals such as "[0, 1, 0, ...]".
        return np.array([ast.literal_eval(text) for text in table["labels"]], dtype=np.float32)


class PeptidesStructural(_Peptides):
    r"""Peptides-struct from the `"Long Range Graph Benchmark" <https://arxiv.org/abs/2206.08164>`_: the same 15,535
    peptides, 11 regression targets of their 3D shape (mean absolute error).

    Target ``y`` :math:`(1, 11)` float: the columns :attr:`target_names` of LRGB's standardised file (zero mean, unit
    variance), in that order. Split 10,873 / 2,331 / 2,331.

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "peptides-struct"
    target_names = PEPTIDES_STRUCT_TARGETS
    csv_file = RawFile("peptide_structure_normalized_dataset.csv.gz",
                       f"{LRGB_PEPTIDES}/0d4aalmq4b4e2nh/peptide_structure_normalized_dataset.csv.gz?dl=1",
                       "c240c1c15466b5c907c63e180fa8aa89", "peptides-struct")
    split_file = RawFile("splits_random_stratified_peptide_structure.pickle",
                         f"{LRGB_PEPTIDES}/9dfifzft1hqgow6/splits_random_stratified_peptide_structure.pickle?dl=1",
                         "5a0114bdadc80b94fc7ae974f13ef061", "peptides-struct")
    raw_files = (csv_file, split_file)

    def targets(self, table: pd.DataFrame) -> np.ndarray:
        missing = [name for name in self.target_names if name not in table.columns]
        if missing:
            raise ValueError(f"{self.csv_file.name} lacks target columns {missing}; is it LRGB's Peptides-struct file?")
        return table[list(self.target_names)].to_numpy(dtype=np.float32)


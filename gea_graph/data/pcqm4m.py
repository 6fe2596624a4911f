r"""PCQM4Mv2 and PCQM4M (OGB-LSC HOMO-LUMO gap), in OGB's raw layout, built from their SMILES."""

from __future__ import annotations

import os
import os.path as osp
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from gea_graph.data.cards import PCQM4MV2_SPLITS
from gea_graph.data.download import RawFile, check_gzip, fetch
from gea_graph.data.molecules import _NUMPY_SAFE_GLOBALS, MoleculeSource, _MoleculeDataset
from gea_graph.io import ensure_folder, extracted_zip, move_into


class _OGBLSCMolecules(_MoleculeDataset):
    """An OGB-LSC HOMO-LUMO gap dataset in OGB's raw layout: ``root/<folder>/raw/data.csv.gz`` (columns idx,
    smiles, homolumogap) and ``root/<folder>/split_dict.pt`` (OGB split name -> index array)."""

    ogb_split_names: ClassVar[dict[str, str]]
    archive: RawFile

    @classmethod
    def _canonical_split(cls, split: str) -> str:
        return super()._canonical_split("val" if split == "valid" else split)

    @property
    def raw_file_names(self) -> list[str]:
        return ["data.csv.gz"]

    @property
    def split_dict_path(self) -> str:
        return osp.join(self.root, self.folder, "split_dict.pt")

    def download(self) -> None:
        archive = fetch(self.archive, self.root)
        with extracted_zip(archive, self.root) as tmp:
            inside = osp.join(tmp, self.folder)
            ensure_folder(osp.join(self.root, self.folder))
            for name in os.listdir(inside):  # raw/ and split_dict.pt, beside any processed/ caches
                move_into(osp.join(inside, name), osp.join(self.root, self.folder, name))
        os.unlink(archive)

    def source(self) -> MoleculeSource:
        path = osp.join(self.raw_dir, "data.csv.gz")
        check_gzip(path)
        # Only the two columns used (OGB's file has a third, idx): at 3.8M rows the rest is memory for nothing.
        table = pd.read_csv(path, usecols=["smiles", "homolumogap"], dtype={"smiles": str})
        # weights_only: a split file can never run code; OGB stores numpy index arrays (admitted) or tensors.
        with torch.serialization.safe_globals(_NUMPY_SAFE_GLOBALS):
            split_dict = torch.load(self.split_dict_path, weights_only=True)
        missing = [name for name in self.ogb_split_names.values() if name not in split_dict]
        if missing:
            raise ValueError(f"{self.split_dict_path} lacks the split(s) {missing} (it has {sorted(split_dict)}); "
                             f"is it OGB's split file of {type(self).__name__}?")
        return MoleculeSource(table["smiles"].tolist(), table[["homolumogap"]].to_numpy(), path,
                              {split: np.asarray(split_dict[self.ogb_split_names[split]], dtype=np.int64)
                               for split in self.splits}, files=(path, self.split_dict_path))


class PCQM4Mv2(_OGBLSCMolecules):
    r"""PCQM4Mv2 from the `"OGB-LSC" <https://arxiv.org/abs/2103.09430>`_ challenge: 3,746,620 molecules, HOMO-LUMO
    gap regression (eV, mean absolute error), in OGB's raw layout::

        root/pcqm4m-v2/raw/data.csv.gz   columns idx, smiles, homolumogap
        root/pcqm4m-v2/split_dict.pt     {"train", "valid", "test-dev", "test-challenge"} -> index arrays

    A folder already in that layout is used as it is; otherwise OGB's zip is taken from the mirror
    (``$GEA_GRAPH_MIRROR/pcqm4mv2/pcqm4m-v2.zip``) or downloaded. ``split_dict.pt`` is read with
    ``torch.load(weights_only=True)`` (numpy arrays admitted).

    Splits: ``train``, ``val`` (OGB's ``valid``), ``test-dev``, ``test-challenge``. The last two have no public
    labels: their ``y`` is NaN. (GraphGPS reports OGB's ``valid`` as its test set.) Target ``y`` :math:`(1)`.
    Featurised by OGB's ``smiles2graph`` (``x`` :math:`(N, 9)`, ``edge_attr`` :math:`(E, 3)` long).

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "pcqm4m-v2"
    splits = PCQM4MV2_SPLITS
    ogb_split_names: ClassVar[dict[str, str]] = {"train": "train", "val": "valid", "test-dev": "test-dev",
                                                 "test-challenge": "test-challenge"}
    archive = RawFile("pcqm4m-v2.zip", "http://ogb-stanford-dataset.s3.amazonaws.com/data/lsc/pcqm4m-v2.zip",
                      None, "pcqm4mv2")


class PCQM4M(_OGBLSCMolecules):
    r"""PCQM4M (v1, "PCQM4M-LSC") from the `"OGB-LSC" <https://arxiv.org/abs/2103.09430>`_ challenge of KDD Cup 2021:
    3,803,453 molecules, HOMO-LUMO gap regression (eV, mean absolute error); the dataset of the GFSA paper's PCQM4M
    column. OGB's raw layout::

        root/pcqm4m_kddcup2021/raw/data.csv.gz   columns idx, smiles, homolumogap
        root/pcqm4m_kddcup2021/split_dict.pt     {"train", "valid", "test"} -> index arrays

    A folder already in that layout is used as it is; otherwise OGB's zip ``pcqm4m_kddcup2021.zip`` is taken from the
    mirror (``$GEA_GRAPH_MIRROR/pcqm4m/``) or downloaded from the URL OGB uses, and checked against the MD5 that OGB's
    source records for it. ``split_dict.pt`` is read with ``torch.load(weights_only=True)`` only.

    Splits: ``train`` (3,045,360), ``val`` (OGB's ``valid``, 380,670), ``test`` (377,423, no public labels: ``y`` is
    NaN). Papers report the ``valid`` MAE. Target ``y`` :math:`(1)`. Featurised like :class:`PCQM4Mv2` (OGB's
    ``smiles2graph``).

    Args:
        root, split, transform, pre_transform, pre_filter, pe, force_reload, skip_invalid: see
            :class:`~gea_graph.data.base.CachedDataset`.
    """

    folder = "pcqm4m_kddcup2021"
    splits = ("train", "val", "test")
    ogb_split_names: ClassVar[dict[str, str]] = {"train": "train", "val": "valid", "test": "test"}
    # The URL of ogb.lsc.PygPCQM4MDataset (ogb 1.3.6); the MD5 is the one OGB's source gives for this zip.
    archive = RawFile("pcqm4m_kddcup2021.zip",
                      "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m_kddcup2021.zip",
                      "5144ebaa7c67d24da1a2acbe41f57f6a", "pcqm4m")


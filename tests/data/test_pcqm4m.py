"""PCQM4M (v1, OGB-LSC 2021) on small files in OGB's layout: pcqm4m_kddcup2021/raw/data.csv.gz + split_dict.pt."""

import os
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
from ogb.utils import smiles2graph

from gea_graph.data import DATASETS, PCQM4M, RawFile, RawFileError, get_dataset, md5sum

SMILES = ["CC(=O)Oc1ccccc1C(=O)O", "c1ccc2[nH]ccc2c1", "C[NH3+]", "O=C([O-])CCl", "CCN(CC)CC", "C#N", "OCCO",
          "c1ccncc1", "CC(C)(C)O", "FC(F)(F)c1ccccc1"]
SPLIT = {"train": np.array([0, 2, 4, 6, 8, 9]), "valid": np.array([1, 5]), "test": np.array([3, 7])}


def write_layout(folder) -> np.ndarray:
    """OGB's v1 layout: ``data.csv.gz`` (idx, smiles, homolumogap; test labels NaN) and ``split_dict.pt``."""
    gap = np.linspace(3.0, 7.5, len(SMILES))
    gap[SPLIT["test"]] = np.nan
    (folder / "raw").mkdir(parents=True)
    pd.DataFrame({"idx": np.arange(len(SMILES)), "smiles": SMILES, "homolumogap": gap}).to_csv(
        folder / "raw" / "data.csv.gz", index=False, compression="gzip")
    torch.save(SPLIT, folder / "split_dict.pt")  # numpy index arrays, as OGB's file
    return gap


def test_pcqm4m_from_ogb_layout(data_root):
    gap = write_layout(data_root / "pcqm4m_kddcup2021")
    train = PCQM4M(data_root, "train", pe="lap:2")
    assert len(train) == 6 and train[1].smiles == SMILES[2]
    assert torch.equal(train[1].x, torch.from_numpy(smiles2graph(SMILES[2])["node_feat"]))  # OGB features
    assert train[1].y.shape == (1,) and train[1].y.item() == pytest.approx(gap[2])
    assert [d.smiles for d in PCQM4M(data_root, "valid")] == [SMILES[1], SMILES[5]]  # "valid" = "val"
    test = PCQM4M(data_root, "test")
    assert len(test) == 2 and torch.isnan(test.y).all()
    with pytest.raises(ValueError, match="test-dev"):
        PCQM4M(data_root, "test-dev")
    # The registry: labelled splits only, so training reads OGB's valid split as its test split.
    assert DATASETS["pcqm4m"].splits == ("train", "val") and DATASETS["pcqm4m"].folder == PCQM4M.folder
    assert len(get_dataset("pcqm4m", data_root, "val")) == 2


def test_pcqm4m_split_file_is_never_unpickled_and_must_hold_ogb_splits(data_root):
    write_layout(data_root / "pcqm4m_kddcup2021")
    torch.save({"train": SPLIT["train"], "valid": SPLIT["valid"]}, data_root / "pcqm4m_kddcup2021" / "split_dict.pt")
    with pytest.raises(ValueError, match=r"lacks the split\(s\) \['test'\]"):
        PCQM4M(data_root)

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({**SPLIT, "x": Payload()}, data_root / "pcqm4m_kddcup2021" / "split_dict.pt")
    with pytest.raises(Exception, match="Weights only load failed|Unsupported global"):
        PCQM4M(data_root)


def test_pcqm4m_zip_from_the_mirror_is_md5_checked(tmp_path, data_root, monkeypatch):
    folder = tmp_path / "build" / "pcqm4m_kddcup2021"
    write_layout(folder)
    mirror = tmp_path / "mirror" / "pcqm4m"
    mirror.mkdir(parents=True)
    archive = mirror / "pcqm4m_kddcup2021.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder.parent))
    monkeypatch.setenv("GEA_GRAPH_MIRROR", str(tmp_path / "mirror"))
    # Not OGB's zip: the MD5 OGB records for pcqm4m_kddcup2021.zip rejects it, and nothing is extracted.
    with pytest.raises(RawFileError, match="MD5 mismatch.*5144ebaa7c67d24da1a2acbe41f57f6a"):
        PCQM4M(data_root)
    assert not (data_root / "pcqm4m_kddcup2021" / "raw" / "data.csv.gz").exists()

    checked = RawFile(PCQM4M.archive.name, PCQM4M.archive.url, md5sum(archive), "pcqm4m")

    class MatchingPCQM4M(PCQM4M):
        archive = checked

    assert len(MatchingPCQM4M(data_root, "train")) == 6  # copied from the mirror, checked, extracted
    assert not (data_root / "pcqm4m_kddcup2021.zip").exists()

"""Loaders of datasets that are not mirrored, run on small files written in their real raw formats."""

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from rdkit import Chem
from torch_geometric.loader import DataLoader

from gea_graph.data import COCOSP, PascalVOCSP, PCQM4Mv2, PCQMContact


@pytest.fixture(scope="module")
def pcqm_root(mirror, tmp_path_factory):
    """An OGB-layout PCQM4Mv2 folder built from the mirrored 2k sample (CXSMILES stripped to heavy-atom SMILES)."""
    sample = pd.read_csv(mirror / "pcqm4mv2-sample" / "pcqm4mv2-2k.csv")
    smiles = [Chem.MolToSmiles(Chem.RemoveHs(Chem.MolFromSmiles(s))) for s in sample["smiles"]]
    n = len(smiles)
    gap = sample["homo"].to_numpy(dtype=float, copy=True)
    parts = np.split(np.random.default_rng(0).permutation(n), [int(0.7 * n), int(0.8 * n), int(0.9 * n)])
    split = dict(zip(["train", "valid", "test-dev", "test-challenge"], parts))
    gap[np.concatenate([split["test-dev"], split["test-challenge"]])] = np.nan  # unlabelled, as in OGB
    root = tmp_path_factory.mktemp("pcqm")
    (root / "pcqm4m-v2" / "raw").mkdir(parents=True)
    pd.DataFrame({"idx": np.arange(n), "smiles": smiles, "homolumogap": gap}).to_csv(
        root / "pcqm4m-v2" / "raw" / "data.csv.gz", index=False, compression="gzip")
    torch.save({k: v for k, v in split.items()}, root / "pcqm4m-v2" / "split_dict.pt")  # numpy arrays, as OGB
    return root, smiles, gap, split


def test_pcqm4mv2_from_ogb_layout(pcqm_root):
    root, smiles, gap, split = pcqm_root
    train = PCQM4Mv2(root, "train", pe="lap:4")
    assert len(train) == len(split["train"])
    d = train[3]
    row = int(split["train"][3])
    assert d.smiles == smiles[row] and "|" not in d.smiles and "[H]" not in d.smiles
    assert d.x.shape == (Chem.MolFromSmiles(smiles[row]).GetNumAtoms(), 9)
    assert d.y.shape == (1,) and d.y.item() == pytest.approx(gap[row], rel=1e-6)
    assert PCQM4Mv2(root, "valid").y.isfinite().all()  # "valid" is an alias of "val"
    dev = PCQM4Mv2(root, "test-dev")
    assert len(dev) == len(split["test-dev"]) and torch.isnan(dev.y).all()
    assert torch.isnan(PCQM4Mv2(root, "test-challenge").y).all()
    with pytest.raises(ValueError, match="test-dev"):
        PCQM4Mv2(root, "test")


def test_peptides_struct_tiny_file(data_root, write_struct_csv, tiny_struct):
    raw = data_root / "peptides-struct" / "raw"
    raw.mkdir(parents=True)
    smiles = ["CC(N)C(=O)NCC(=O)O", "NCC(=O)O", "CC(C)C(N)C(=O)O", "NC(CO)C(=O)O", "c1ccccc1CC(N)C(=O)O"]
    table = write_struct_csv(raw / "peptide_structure_normalized_dataset.csv.gz", smiles)
    with open(raw / "splits_random_stratified_peptide_structure.pickle", "wb") as f:
        pickle.dump({"train": np.array([4, 0, 2]), "val": np.array([1]), "test": np.array([3])}, f)
    train = tiny_struct(data_root, "train")
    assert len(train) == 3 and train[0].smiles == smiles[4]
    assert train[0].y.shape == (1, 11)
    names = list(train.target_names)
    np.testing.assert_allclose(train.y.numpy(), table.loc[[4, 0, 2], names].to_numpy(), rtol=1e-6)
    assert len(tiny_struct(data_root, "test")) == 1


def superpixel_graph(n, classes, rng):
    src = np.arange(n - 1)
    ei = torch.tensor(np.stack([np.r_[src, src + 1], np.r_[src + 1, src]]))
    return (torch.tensor(rng.random((n, 14)), dtype=torch.float64), torch.tensor(rng.random((ei.shape[1], 2))),
            ei, torch.tensor(rng.choice(classes, n)))


@pytest.mark.parametrize("cls,name,classes", [(PascalVOCSP, "pascalvoc-sp", np.arange(21)),
                                              (COCOSP, "coco-sp", np.array([0, 1, 13, 90]))])
def test_superpixels_tiny_pickles(data_root, cls, name, classes):
    rng = np.random.default_rng(0)
    raw = data_root / name / "raw"
    raw.mkdir(parents=True)
    graphs = {s: [superpixel_graph(n, classes, rng) for n in (5, 7)] for s in ("train", "val", "test")}
    for s, gs in graphs.items():
        with open(raw / f"{s}.pickle", "wb") as f:
            pickle.dump(gs, f)
    ds = cls(data_root, "val", pe="rw:3")
    d = ds[1]
    assert d.x.dtype == torch.float32 and d.x.shape == (7, 14) and d.edge_attr.shape == (12, 2)
    assert d.y.dtype == torch.long and d.y.shape == (7,) and d.rw_pe.shape == (7, 3)
    if name == "coco-sp":  # COCO ids 13 and 90 map to 12 and 80
        expected = {0: 0, 1: 1, 13: 12, 90: 80}
        assert d.y.tolist() == [expected[v] for v in graphs["val"][1][3].tolist()]
    else:
        assert d.y.tolist() == graphs["val"][1][3].tolist()


def test_superpixel_pickle_carrying_code_is_refused(data_root):
    import os

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    raw = data_root / "pascalvoc-sp" / "raw"
    raw.mkdir(parents=True)
    for s in ("train", "val", "test"):
        with open(raw / f"{s}.pickle", "wb") as f:
            pickle.dump([Evil()], f)
    with pytest.raises(pickle.UnpicklingError, match="system"):
        PascalVOCSP(data_root)


def test_pcqm_contact_tiny_files_expose_link_targets(data_root):
    raw = data_root / "pcqm-contact" / "raw"
    raw.mkdir(parents=True)
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    graph = (torch.zeros(3, 9, dtype=torch.long), torch.zeros(4, 3, dtype=torch.long), ei,
             torch.tensor([[0, 0], [2, 1]]), torch.tensor([1, 0]))
    for s in ("train", "val", "test"):
        torch.save([graph, graph], raw / f"{s}.pt")
    ds = PCQMContact(data_root, "test")
    d = ds[0]
    assert d.edge_label_index.tolist() == [[0, 0], [2, 1]] and d.edge_label.tolist() == [1, 0]
    batch = next(iter(DataLoader(ds, batch_size=2)))
    assert batch.edge_label_index[:, 2:].tolist() == [[3, 3], [5, 4]]  # offset by the node count

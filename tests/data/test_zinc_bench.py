"""ZINC in the Benchmarking-GNNs encoding (28 atom types, kekulé bond types): the real 12k molecules, the card's
counts, hand-checked molecules, bad input, and the OGB features kept under ``features="ogb"``."""

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from ogb.utils import smiles2graph
from torch_geometric.data import Batch

from gea_graph.data import ZINC, InvalidSmilesError, RawFile, UnknownAtomTypeError
from gea_graph.data.featurizers import ZINC_ATOM_TYPES, ZINC_BOND_TYPES, featurize

CARD = Path(__file__).resolve().parents[2] / "datasets" / "zinc.md"
SPLITS = ("train", "val", "test")


def bench(smiles: str):
    (graph,) = featurize([smiles], np.zeros((1, 1)), "test", features="bench")
    return graph.x[:, 0].tolist(), graph.edge_attr[:, 0].tolist()


def card_counts(kind: str) -> dict[str, int]:
    """The card's count table of ``kind`` ("atom type" or "bond type"): name -> count."""
    text = CARD.read_text()
    table = text[text.index(f"| id | {kind} |"):].split("\n\n")[0]
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| ([\d,]+) \|$", table, flags=re.MULTILINE)
    return {name: int(count.replace(",", "")) for _, name, count in rows}


def test_vocabulary_is_the_published_one():
    assert len(ZINC_ATOM_TYPES) == 28 and len(set(ZINC_ATOM_TYPES)) == 28
    assert ZINC_ATOM_TYPES[:9] == ("C", "O", "N", "F", "C H1", "S", "Cl", "O -", "N H1 +")
    assert ZINC_ATOM_TYPES[17] == "O H1 +" and ZINC_ATOM_TYPES[-1] == "P H1 +"
    assert ZINC_BOND_TYPES == ("NONE", "SINGLE", "DOUBLE", "TRIPLE")


def test_all_12k_molecules_map_and_counts_equal_the_card(zinc):
    assert sum(len(zinc[s]) for s in SPLITS) == 12_000  # nothing skipped: every atom is in the vocabulary
    x = torch.cat([zinc[s].x for s in SPLITS])
    edge_attr = torch.cat([zinc[s].edge_attr for s in SPLITS])
    assert x.dtype == edge_attr.dtype == torch.long and x.shape[1] == edge_attr.shape[1] == 1
    assert 0 <= x.min() and x.max() < 28 and edge_attr.min() >= 1 and edge_attr.max() <= 3
    atoms = torch.bincount(x[:, 0], minlength=28).tolist()
    bonds = (torch.bincount(edge_attr[:, 0], minlength=4) // 2).tolist()
    assert card_counts("atom type") == dict(zip(ZINC_ATOM_TYPES, atoms))
    assert card_counts("bond type") == dict(zip(ZINC_BOND_TYPES, bonds))
    assert x.shape[0] / 12_000 == pytest.approx(23.2, abs=0.05)  # mean nodes per graph
    assert edge_attr.shape[0] / 12_000 == pytest.approx(49.8, abs=0.06)  # mean directed edges per graph


@pytest.mark.parametrize("smiles, atoms, bonds", [
    # protonated amine, stereocentre with H, carboxylate: N H3 + (10), C H1 (4), O - (7)
    ("[NH3+][C@@H](C)C(=O)[O-]", [10, 4, 0, 0, 1, 7], [1, 1, 1, 1, 1, 1, 2, 2, 1, 1]),
    # aromatic [nH] is plain N in the kekulé SMILES C1=CNC=C1; ring bonds are kekulised (2 double, 3 single)
    ("c1cc[nH]c1", [0, 0, 0, 2, 0], [1] * 6 + [2] * 4),
    # pyridinium [nH+] -> N H1 + (8); nitro: N + (12), O - (7); a stereocentre without H stays C
    ("c1cc[nH+]cc1", [0, 0, 0, 8, 0, 0], [1] * 6 + [2] * 6),
    ("C[C@](F)(Cl)[N+](=O)[O-]", [0, 0, 3, 6, 12, 1, 7], [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1]),
    ("CC#N", [0, 0, 2], [1, 1, 3, 3]),
])
def test_hand_checked_molecules(smiles, atoms, bonds):
    got_atoms, got_bonds = bench(smiles)
    assert got_atoms == atoms
    # Chain molecules: bond ids in bond order (both directions); rings: which Kekulé structure RDKit picks is its
    # choice, so only the multiset of ids is checked.
    assert (got_bonds if "1" not in smiles else sorted(got_bonds)) == bonds


def test_out_of_vocabulary_atom_and_malformed_smiles_are_clear_errors():
    with pytest.raises(UnknownAtomTypeError, match=r"'C\[Si\]\(C\)\(C\)C'.*atom 1.*'Si'"):
        bench("C[Si](C)(C)C")
    with pytest.raises(UnknownAtomTypeError, match=r"'\[NH4\+\]'.*'N H4 \+'.*not one of the 28"):
        bench("[NH4+]")
    with pytest.raises(InvalidSmilesError, match=r"row 0 .*'C1CC'"):
        bench("C1CC")
    with pytest.raises(ValueError, match="features must be one of 'ogb', 'bench', got 'rdkit'"):
        ZINC(features="rdkit")


class TinyZINC(ZINC):
    """ZINC over a small CSV in the real layout (its files are not graphium's, so they carry no MD5)."""

    raw_files = tuple(RawFile(raw.name, "http://invalid.example", None, "none") for raw in ZINC.raw_files)


def test_ogb_features_kept_and_caches_keyed_by_features(data_root):
    smiles = ["Cc1c(I)cnn1C", "C[NH2+][C@H](c1ccccc1)C", "CNC(=O)C(Cl)(Cl)Cl"]
    raw = data_root / "zinc" / "raw"
    raw.mkdir(parents=True)
    pd.DataFrame({"SMILES": smiles, "SA": 1.0, "logp": 2.0, "score": [1.0, 2.0, 3.0]}).to_csv(
        raw / "smiles_score.csv", index=False)
    pd.DataFrame({"train": [0, 1, 2], "val": [1, None, None], "test": [2, None, None]}).to_csv(
        raw / "indexes_train_val_test.csv", index=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*no published MD5")
        ogb, default = TinyZINC(data_root, features="ogb"), TinyZINC(data_root)
    assert ogb.processed_dir != default.processed_dir  # old (OGB) caches are never read as the new encoding
    for i, smi in enumerate(smiles):
        ref = smiles2graph(smi)
        assert torch.equal(ogb[i].x, torch.from_numpy(ref["node_feat"]))
        assert torch.equal(ogb[i].edge_attr, torch.from_numpy(ref["edge_feat"]))
        assert default[i].x.shape == (ref["num_nodes"], 1)
    assert bench(smiles[1])[0] == [0, 11, 4, 0, 0, 0, 0, 0, 0, 0]  # N H2 + (11), C H1 (4)


def test_zinc_recipe_model_runs_on_bench_graphs():
    from gea_graph.models import build_model
    from gea_graph.train.recipe import load_recipe

    recipe = load_recipe("gcn-geanet-zinc", ["model.hidden=16", "model.layers=1"])
    graphs = featurize(["CC(=O)[O-]", "c1ccc2[nH]ccc2c1"], np.zeros((2, 1)), "test", features="bench")
    out = build_model(recipe.model)(Batch.from_data_list(graphs))
    assert out.shape == (2, 1) and torch.isfinite(out).all()

"""The real mirrored files: ZINC and Peptides-func, each built once per session."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.loader import DataLoader

from gea_graph.data import PeptidesFunctional, get_dataset


@pytest.fixture(scope="session")
def peptides(mirror, build_once):
    return build_once("peptides-func", lambda root: {s: PeptidesFunctional(root, s) for s in ("train", "val", "test")})


def test_zinc_sizes_and_targets_follow_the_index_file(zinc, mirror):
    assert [len(zinc[s]) for s in ("train", "val", "test")] == [10_000, 1_000, 1_000]
    table = pd.read_csv(mirror / "zinc-subset" / "smiles_score.csv")
    index = pd.read_csv(mirror / "zinc-subset" / "indexes_train_val_test.csv")
    for split in ("train", "val", "test"):
        rows = index[split].dropna().astype(int).to_numpy()
        ds = zinc[split]
        np.testing.assert_allclose(ds.y.numpy(), table["score"].to_numpy()[rows], rtol=1e-6)
        first = ds[0]
        assert first.smiles == table["SMILES"][rows[0]]


def test_zinc_schema_and_padding(zinc):
    d = zinc["train"][0]
    assert d.x.dtype == torch.long and d.x.shape[1] == 1 and d.edge_attr.shape[1] == 1  # bench encoding
    assert d.y.shape == (1,)
    assert d.lap_eigvec.shape == (d.num_nodes, 8) and d.rw_pe.shape == (d.num_nodes, 20)
    sizes = torch.from_numpy(zinc["train"].num_nodes_per_graph())  # without materialising 10k graphs
    small = zinc["train"][int(sizes.argmin())]
    # A connected 8-atom molecule has 7 non-trivial eigenpairs: the 8th column is padding.
    assert small.num_nodes <= 9 and small.lap_mask[0].sum() == small.num_nodes - 1
    assert not small.lap_mask[:, -1].any() and torch.all(small.lap_eigvec[:, -1] == 0)
    batch = next(iter(DataLoader(zinc["train"], batch_size=32)))
    assert batch.y.shape == (32,) and batch.lap_eigvec.shape[0] == batch.num_nodes


def test_zinc_registry_reuses_the_cache(zinc, shared_data_root):
    ds = get_dataset("zinc", shared_data_root, "val", pe="lap:8,rw:20")
    assert ds.processed_dir == zinc["val"].processed_dir and len(ds) == 1000


def test_the_splits_share_one_mapping_of_each_store_file(zinc):
    # one mapping a file per process: three would hold the file up to three times in the resident set
    train, val, test = (zinc[s].store for s in ("train", "val", "test"))
    for key, column in train.columns.items():
        assert val.columns[key] is column and test.columns[key] is column, key


def test_peptides_func_sizes_and_labels(peptides, mirror):
    assert [len(peptides[s]) for s in ("train", "val", "test")] == [10_873, 2_331, 2_331]
    d = peptides["train"][0]
    assert d.y.shape == (1, 10) and set(torch.unique(peptides["train"].y).tolist()) <= {0.0, 1.0}
    assert d.x.shape[1] == 9 and d.edge_attr.shape[1] == 3 and isinstance(d.smiles, str)
    table = pd.read_csv(mirror / "peptides-func" / "peptide_multi_class_dataset.csv.gz")
    from gea_graph.data import safe_pickle
    split = safe_pickle.load(mirror / "peptides-func" / "splits_random_stratified_peptide.pickle")
    row = int(split["test"][5])
    assert peptides["test"][5].smiles == table["smiles"][row]
    assert peptides["test"][5].y.flatten().tolist() == [float(v) for v in eval(table["labels"][row])]

import time

import numpy as np
import pytest
import torch
from torch_geometric.loader import DataLoader

from gea_graph.data import TreeNeighbourMatch, get_dataset


def test_tree_r2_has_all_96_graphs_and_labels_follow_from_leaves(data_root):
    train, test = TreeNeighbourMatch(data_root, 2, "train"), TreeNeighbourMatch(data_root, 2, "test")
    assert len(train) + len(test) == 96
    seen = set()
    for ds in (train, test):
        for d in ds:
            assert d.x.shape == (7, 2) and d.x.dtype == torch.long and d.edge_index.shape == (2, 6)
            assert d.target_mask.tolist() == [True] + [False] * 6
            none = ds.none_index
            assert none == 4 and d.x[0, 1] == none and torch.all(d.x[1:3] == none)
            leaves = d.x[3:]
            assert leaves[:, 0].tolist() == [0, 1, 2, 3] and sorted(leaves[:, 1].tolist()) == [0, 1, 2, 3]
            query = int(d.x[0, 0])
            assert int(d.y) == int(leaves[leaves[:, 0] == query, 1])
            seen.add((tuple(leaves[:, 1].tolist()), query))
    assert len(seen) == 96  # every (permutation, query) once
    # child -> parent edges of a heap-ordered tree
    assert train[0].edge_index.tolist() == [[1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 2, 2]]
    # stratified 80/20: each of the 4 classes has 24 graphs, 19 in train
    assert np.bincount(train.y.numpy()).tolist() == [19] * 4


def test_tree_moderate_depth_is_fast_seeded_and_batches(data_root):
    start = time.perf_counter()
    train = get_dataset("tree-r4", data_root, "train", pe="lap:4")
    test = get_dataset("tree", data_root, "test", pe="lap:4", depth=4)
    assert time.perf_counter() - start < 60
    assert len(train) + len(test) == 64_000 and abs(len(test) / 64_000 - 0.2) < 1e-3
    counts = np.bincount(train.y.numpy(), minlength=16)
    assert counts.min() == counts.max()  # stratified
    d = train[123]
    assert d.x.shape == (31, 2) and d.lap_eigvec.shape == (31, 4) and int(d.y) == int(d.x[15 + int(d.x[0, 0]), 1])
    batch = next(iter(DataLoader(train, batch_size=8)))
    assert batch.x.shape == (8 * 31, 2) and batch.target_mask.sum() == 8 and batch.edge_index.max() == 8 * 31 - 1
    assert train[:10].y.tolist() == [int(train[i].y) for i in range(10)]  # slicing keeps labels aligned
    other_seed = TreeNeighbourMatch(data_root, 4, "train", seed=1)
    assert not torch.equal(other_seed.y[:100], train.y[:100])
    with pytest.raises(ValueError):
        TreeNeighbourMatch(data_root, 4, "val")

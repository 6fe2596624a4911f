"""Data on the device (gea_graph.data.device): a split stored once as concatenated tensors gives, by index gathers,
the batch its host loader gives for the same indices, field by field (slice and increment records, batch vector,
ptr, edge_index offsets), in the loader's shuffled order; with empty-edge, single-node and disconnected graphs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_store import graphs
from torch_geometric.data import Batch, Data

from gea_graph.data import MoleculeCSV, TreeNeighbourMatch
from gea_graph.data.device import DeviceLoader, DeviceSplit, fits_on_device, host_ptr
from gea_graph.models.networks import host_sizes
from gea_graph.train import fixed_size
from gea_graph.train.data import make_loader
from gea_graph.transforms import ShortestPathDistance

#: Molecules with a single atom (no bond), two ions (disconnected, no bond), rings and chains.
SMILES = ["C", "CCO", "[Na+].[Cl-]", "c1ccccc1", "CC(=O)O", "N", "C1CC1", "CCN(CC)CC", "O=C=O", "CCCCCCCC",
          "c1ccncc1", "Cl", "CC#N", "OCC(O)CO", "C1CCOC1", "CS(C)=O"]


def molecules(root, pe: str) -> MoleculeCSV:
    """A Peptides-func-like split: molecules, two binary targets (one missing), LapPE and RWPE."""
    rows = "".join(f"{s},{i % 2},{'' if i == 3 else (i // 2) % 2}\n" for i, s in enumerate(SMILES))
    (root / "m.csv").write_text("smiles,a,b\n" + rows)
    return MoleculeCSV(root, root / "m.csv", "smiles", ["a", "b"], split_fractions=(1.0, 0.0, 0.0), pe=pe)


def assert_same_batch(a: Batch, b: Batch) -> None:
    """Field by field (dtypes, values with missing targets, NaN, in place), the node offsets and the slice and
    increment records; ``a`` may be on another device."""
    assert sorted(a.keys()) == sorted(b.keys())
    for key in b.keys():  # noqa: SIM118 (iterating a Data yields pairs)
        if torch.is_tensor(b[key]):
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            torch.testing.assert_close(a[key].cpu(), b[key].cpu(), rtol=0, atol=0, equal_nan=True, msg=key)
        else:
            assert a[key] == b[key], key
    assert a.num_graphs == b.num_graphs and a.num_nodes == b.num_nodes
    assert torch.equal(host_ptr(a), b.ptr)
    assert a._slice_dict.keys() == b._slice_dict.keys()
    for key in b._slice_dict:
        assert torch.equal(a._slice_dict[key], b._slice_dict[key]), key
        inc_a, inc_b = a._inc_dict[key], b._inc_dict[key]
        assert (inc_a is None and inc_b is None) or torch.equal(inc_a, inc_b), key


def edge_cases() -> list[Data]:
    """Random graphs (all their field kinds: node pairs, paths, text) and a single node, an edgeless graph."""
    data = graphs(24, seed=1)
    for at, n in ((2, 1), (9, 4)):
        g = data[at]
        bare = Data(x=g.x[:n], edge_index=torch.zeros(2, 0, dtype=torch.long), edge_attr=g.edge_attr[:0], y=g.y,
                    rw_pe=g.rw_pe[:n], mask=g.mask[:n], node_y=g.node_y[:n],
                    edge_label_index=torch.zeros(2, 3, dtype=torch.long), smiles=g.smiles, num_nodes=n)
        data[at] = ShortestPathDistance(max_distance=5, max_path=3)(bare)
    return data


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("device")
    (root / "mol").mkdir()
    return {"molecules with LapPE": molecules(root / "mol", "lap:4,rw:4"),
            "trees with LapPE": TreeNeighbourMatch(root / "tree", depth=2, pe="lap:4"),
            "graph list": edge_cases()}


@pytest.mark.parametrize("name", ["molecules with LapPE", "trees with LapPE", "graph list"])
def test_device_batches_equal_the_host_loader_batches(splits, name):
    check_loader_batches(splits[name])


def test_real_zinc_with_lappe_batches_on_the_device_equal_the_host_loader_batches(zinc):
    check_loader_batches(zinc["val"][:200])


def check_loader_batches(dataset) -> None:
    stored = DeviceSplit(dataset)
    for batch_size, seed in ((5, 0), (1, 3), (len(dataset), 7)):
        reference = make_loader(dataset, batch_size, shuffle_seed=seed)
        loader = make_loader(dataset, batch_size, shuffle_seed=seed, resident=stored)
        assert isinstance(loader, DeviceLoader) and len(loader) == len(reference)
        for epoch in (0, 1):  # a new order each epoch, the host loader's
            for sampler in (reference.batch_sampler.sampler, loader.batch_sampler.sampler):
                sampler.set_epoch(epoch)
            count = 0
            for got, want in zip(loader, reference, strict=True):
                assert_same_batch(got, want)  # batch and ptr are fields too
                count += 1
            assert count == len(reference)


def test_single_node_and_edgeless_graphs_alone_and_repeated(splits):
    data = splits["graph list"]
    stored = DeviceSplit(data)
    for index in ([2], [9], [2, 9], [9, 2, 2], [23, 0, 2], list(range(24))[::-1]):
        got = stored.batch(index, torch.tensor(index))
        want = make_loader([data[i] for i in index], len(index)).__iter__().__next__()
        assert_same_batch(got, want)
    assert stored.batch([2]).edge_index.shape == (2, 0)
    with pytest.raises(IndexError, match="in \\[0, 24\\)"):
        stored.batch([24])


def test_a_split_is_stored_once_and_its_size_is_counted(splits):
    dataset = splits["molecules with LapPE"]
    stored = DeviceSplit(dataset)
    nodes = int(dataset.num_nodes_per_graph().sum())
    assert stored.fields["x"].values.shape[0] == nodes  # the last graph, collated twice to read its increments, once
    assert stored.nbytes >= sum(f.values.numel() * f.values.element_size() for f in stored.fields.values())
    assert "16 graphs" in repr(stored)


def test_a_split_that_cannot_be_stored_is_refused(splits):
    class Flipped(list):
        transform = staticmethod(lambda g: g)

    with pytest.raises(ValueError, match="data.on_device: Flipped has a transform"):
        DeviceSplit(Flipped(splits["graph list"]))
    with pytest.raises(ValueError, match="no graph"):
        DeviceSplit([])


def test_auto_needs_a_gpu_and_a_share_of_its_free_memory(monkeypatch):
    assert not fits_on_device(1, torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 4000))
    assert fits_on_device(249, torch.device("cuda"))
    assert not fits_on_device(250, torch.device("cuda"))
    assert np.isclose(fits_on_device.__defaults__[0], 0.25)


@pytest.mark.parametrize("name", ["molecules with LapPE", "trees with LapPE", "graph list"])
def test_device_batches_pad_to_the_host_path_s_fixed_size_batches(splits, name):
    dataset = splits[name]
    shapes = fixed_size.plan_shapes(*fixed_size.graph_sizes(dataset), batch_size=5)
    kinds = fixed_size.field_kinds(next(iter(make_loader(dataset, len(dataset)))))
    loader = make_loader(dataset, 5, shuffle_seed=1, resident=DeviceSplit(dataset))
    for got, want in zip(loader, make_loader(dataset, 5, shuffle_seed=1), strict=True):
        assert fixed_size.field_kinds(got) == fixed_size.field_kinds(want)
        shape = fixed_size.choose_shape(shapes, got)
        assert shape == fixed_size.choose_shape(shapes, want)
        padded, reference = fixed_size.pad_batch(got, shape, kinds), fixed_size.pad_batch(want, shape, kinds)
        assert_same_batch(padded, reference)  # the masks, the padding graphs' batch rows and ptr too
        assert padded._store._num_nodes == reference._store._num_nodes
        assert host_sizes(padded, host_ptr(padded))["node_counts"].tolist() == \
            host_sizes(reference)["node_counts"].tolist()


@pytest.mark.parametrize("name", ["molecules with LapPE", "trees with LapPE", "graph list"])
def test_gathering_and_padding_read_nothing_from_the_device(splits, name):
    # On the meta device a tensor has a shape but no values: reading one on the host (.item(), .tolist(), an output
    # size taken from the data) raises. The batch's sizes and records come from the host offsets alone.
    dataset = splits[name]
    shapes = fixed_size.plan_shapes(*fixed_size.graph_sizes(dataset), batch_size=4)
    kinds = fixed_size.field_kinds(next(iter(make_loader(dataset, len(dataset)))))
    loader = make_loader(dataset, 4, shuffle_seed=2, resident=DeviceSplit(dataset, "meta"))
    for got, want in zip(loader, make_loader(dataset, 4, shuffle_seed=2), strict=True):
        assert got.x.device.type == "meta" and got.ptr.device.type == "meta"
        padded = fixed_size.pad_batch(got, fixed_size.choose_shape(shapes, want), kinds)
        reference = fixed_size.pad_batch(want, fixed_size.choose_shape(shapes, want), kinds)
        assert padded.node_mask.device.type == "meta" and torch.equal(host_ptr(padded), reference.ptr)
        for key in reference.keys():  # noqa: SIM118 (iterating a Data yields pairs)
            if torch.is_tensor(reference[key]):
                assert padded[key].shape == reference[key].shape and padded[key].dtype == reference[key].dtype, key
        for key in reference._slice_dict:
            assert torch.equal(padded._slice_dict[key], reference._slice_dict[key]), key

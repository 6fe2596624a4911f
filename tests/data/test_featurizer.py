"""The featurisation record of a dataset, and SMILES featurised by it exactly as the dataset build made the graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gea_graph.data import Featurizer, FeaturizerError
from gea_graph.data.featurizer import target_names, vocabulary
from gea_graph.data.featurizers import featurize_chunk
from gea_graph.data.store import GraphStore, graphs_to_columns


def test_zinc_smiles_featurise_to_the_built_dataset_field_for_field(zinc):
    """The ZINC test molecules, featurised from their SMILES with the recipe's PE spec, give the very batch the
    built dataset gives (every field, dtype and value, LapPE signs included); only the targets are unknown."""
    test = zinc["test"]
    featurizer = Featurizer.of_data(name="zinc", pe="lap:8,rw:20")
    smiles = test.smiles
    out = featurizer.featurize(smiles)
    assert out.errors == {} and out.rows.tolist() == list(range(len(test)))
    index = np.arange(len(test))
    ours, built = out.batch(index), test.batch(index)
    assert sorted(ours.keys()) == sorted(built.keys())
    for key in built.keys():  # noqa: SIM118 (iterating a Batch yields pairs)
        if key == "y":
            continue
        if torch.is_tensor(built[key]):
            assert ours[key].dtype == built[key].dtype, key
            torch.testing.assert_close(ours[key], built[key], rtol=0, atol=0, equal_nan=True, msg=key)
        else:
            assert ours[key] == built[key], key


def test_invalid_inputs_get_a_reason_and_the_others_their_graphs():
    featurizer = Featurizer.of_data(name="zinc", pe="rw:4")
    inputs = ["CCO", "C[Si](C)(C)C", "C1CC(N", None, "  ", "C", "c1ccncc1"]
    out = featurizer.featurize(inputs)
    assert out.rows.tolist() == [0, 5, 6]
    assert set(out.errors) == {1, 2, 3, 4}
    assert "outside the model's vocabulary (ZINC's 28 atom" in out.errors[1] and "'Si'" in out.errors[1]
    assert out.errors[2] == "RDKit cannot parse this SMILES"
    assert out.errors[3] == out.errors[4] == "no SMILES (an empty cell)"
    single = out.batch([1])  # "C": one atom, no bond
    assert single.num_nodes == 1 and single.edge_index.shape == (2, 0) and single.edge_attr.shape == (0, 1)
    assert single.rw_pe.shape == (1, 4)
    # OGB's features know silicon
    assert Featurizer.of_data(name="zinc", options={"features": "ogb"}).featurize(["C[Si](C)(C)C"]).errors == {}


def test_graph_datasets_refuse_smiles_in_one_line_saying_why():
    for name, why in [("pascalvoc-sp", "superpixels"), ("tree-r2", "generated trees")]:
        featurizer = Featurizer.of_data(name=name)
        with pytest.raises(FeaturizerError, match=f"cannot take SMILES.*{why}") as err:
            featurizer.featurize(["CCO"])
        assert "\n" not in str(err.value)
    assert Featurizer.of_data(csv="mine.csv").features == "ogb"
    assert Featurizer.of_data(dataset_class="torch_geometric.datasets.QM9").inputs == "graphs"


def test_record_round_trip_and_checks():
    featurizer = Featurizer.of_data(name="zinc", pe="lap:8,rw:20")
    record = featurizer.to_dict()
    assert record["vocabulary"]["atom_types"][:3] == ["C", "O", "N"] and record["format"] == 1
    assert Featurizer.from_dict(record) == featurizer
    assert Featurizer.from_dict(Featurizer.of_data(name="peptides-func").to_dict()).features == "ogb"
    with pytest.raises(FeaturizerError, match="vocabulary differs"):
        Featurizer.from_dict({**record, "vocabulary": {**record["vocabulary"], "atom_types": ["C"]}})
    with pytest.raises(FeaturizerError, match="format 7"):
        Featurizer.from_dict({**record, "format": 7})
    with pytest.raises(FeaturizerError, match="feature mode 'custom'"):
        Featurizer.from_dict({**record, "features": "custom"})
    with pytest.raises(FeaturizerError, match="PE spec"):
        Featurizer.from_dict({**record, "pe": "evil:3"})
    with pytest.raises(FeaturizerError, match="options"):
        Featurizer.from_dict({**record, "options": {"root": "/somewhere"}})
    assert set(vocabulary("ogb")) >= {"possible_atomic_num_list", "possible_bond_type_list"}


def test_target_names_from_the_card_or_the_csv():
    assert target_names("zinc", None, 1) == ["score"]
    assert target_names("peptides-func", None, 10)[:2] == ["antifungal", "cell_cell_communication"]
    assert target_names(None, {"target_columns": ["a", "b"]}, 2) == ["a", "b"]
    assert target_names(None, {"target_columns": "a"}, 1) == ["a"]
    assert target_names("zinc", None, 3) == ["target_0", "target_1", "target_2"]


def test_store_in_memory_batches_as_the_store_on_disk(tmp_path):
    from gea_graph.data.store import build_store

    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C"]
    graphs, kept, _ = featurize_chunk(smiles, np.arange(4, dtype=np.float32), range(4), "ogb")
    columns = graphs if not isinstance(graphs, list) else graphs_to_columns(graphs)
    build_store(tmp_path / "store", 1, lambda c: (columns, kept, {}), {"test": 1},
                lambda rows, reports, counts: {"all": np.arange(len(rows))}, workers=1)
    on_disk, in_memory = GraphStore(tmp_path / "store"), GraphStore.from_columns(columns)
    index = np.array([3, 0, 2])
    a, b = in_memory.batch(index), on_disk.batch(index)
    for key in b.keys():  # noqa: SIM118
        if torch.is_tensor(b[key]):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key
    with pytest.raises(TypeError, match="does not pickle"):
        in_memory.__getstate__()

"""gea_graph.load_model on checkpoints of short real runs: predictions from SMILES equal those from the built dataset,
invalid inputs keep their rows, batch independence, embeddings."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import gea_graph
from gea_graph.data import FeaturizerError
from gea_graph.inference import Predictions, TrainedModel

from .conftest import save_untrained


def direct_predictions(trained: TrainedModel, dataset, batch_size: int = 100) -> np.ndarray:
    """What the model gives on the built dataset, batch by batch as training evaluated it."""
    out = []
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = dataset.batch(np.arange(start, min(start + batch_size, len(dataset))))
            out.append(trained._activation(trained.model(batch)))
    return torch.cat(out).numpy()


def test_load_model_gives_the_trained_model(zinc_run):
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    assert isinstance(trained, TrainedModel) and not trained.model.training
    assert trained.task == "graph_regression" and trained.target_names == ["score"]
    assert trained.recipe.name == "geaet-zinc-quick" and trained.featurizer.features == "bench"
    assert trained.featurizer.pe == "lap:4"
    versions = trained.record["versions"]
    assert versions["torch"] == str(torch.__version__) and set(versions) == {"gea-graph", "torch",
                                                                              "torch_geometric", "rdkit"}


def test_zinc_smiles_predict_as_the_built_dataset(zinc_run, data_dir):
    """The ZINC test molecules predicted from their SMILES equal the predictions made from the built dataset, and
    those of the dataset path (``predict("zinc", split="test")``), to 1e-5."""
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    test = trained.featurizer.load_dataset("test", root=data_dir)
    expected = direct_predictions(trained, test)
    from_smiles = trained.predict(list(test.smiles))
    assert isinstance(from_smiles, Predictions) and from_smiles.values.shape == (1000, 1)
    assert all(e is None for e in from_smiles.errors)
    np.testing.assert_allclose(from_smiles.values, expected, rtol=1e-5, atol=1e-5)
    from_dataset = trained.predict("zinc", split="test", root=data_dir)
    np.testing.assert_allclose(np.asarray(from_dataset), expected, rtol=1e-5, atol=1e-5)
    assert from_dataset.smiles == list(test.smiles)


def test_peptides_smiles_predict_as_the_built_dataset(peptides_run, data_dir):
    trained = gea_graph.load_model(peptides_run / "checkpoints" / "best.ckpt")
    assert trained.task == "graph_multilabel" and trained.target_names[0] == "antifungal"
    test = trained.featurizer.load_dataset("test", root=data_dir)[:48]
    expected = direct_predictions(trained, test, 16)
    got = trained.predict([g.smiles for g in test], batch_size=7)
    assert np.all((got.values >= 0) & (got.values <= 1))  # label probabilities
    np.testing.assert_allclose(got.values, expected, rtol=1e-5, atol=1e-5)
    logits = trained.predict([g.smiles for g in test[:5]], logits=True).values
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), expected[:5], rtol=1e-5, atol=1e-6)


def test_predictions_do_not_depend_on_batch_size_or_order(zinc_run, data_dir):
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    smiles = list(trained.featurizer.load_dataset("val", root=data_dir).smiles)[:128]
    one = trained.predict(smiles, batch_size=1).values
    many = trained.predict(smiles, batch_size=64).values
    np.testing.assert_allclose(one, many, rtol=1e-5, atol=1e-5)
    order = np.random.default_rng(0).permutation(len(smiles))
    permuted = trained.predict([smiles[i] for i in order], batch_size=64).values
    np.testing.assert_allclose(permuted, many[order], rtol=1e-5, atol=1e-5)


def test_invalid_inputs_keep_their_rows_with_a_reason(zinc_run):
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    good = ["Cc1c(I)cnn1C", "CCO", "C"]
    inputs = [good[0], "C[Si](C)(C)C", good[1], "C1CC(N", None, good[2]]
    got = trained.predict(inputs)
    assert len(got) == 6 and got.valid.tolist() == [True, False, True, False, False, True]
    assert "outside the model's vocabulary (ZINC's 28 atom" in got.errors[1] and "'Si'" in got.errors[1]
    assert got.errors[3] == "RDKit cannot parse this SMILES"
    assert np.isnan(got.values[[1, 3, 4]]).all()
    np.testing.assert_allclose(got.values[got.valid], trained.predict(good).values, rtol=1e-5, atol=1e-5)
    embeddings = trained.embed(inputs)
    assert embeddings.shape == (6, 16) and np.isnan(embeddings[[1, 3, 4]]).all()


def test_embeddings_are_what_the_head_reads(zinc_run):
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1"]
    embeddings = trained.embed(smiles, batch_size=2)
    with torch.no_grad():
        from_head = trained.model.head(torch.from_numpy(embeddings)).numpy()
    np.testing.assert_allclose(from_head, trained.predict(smiles).values, rtol=1e-5, atol=1e-5)


def test_graph_inputs_and_errors(zinc_run, data_dir):
    trained = gea_graph.load_model(zinc_run / "checkpoints" / "best.ckpt")
    graphs = trained.graphs(["CCO", "c1ccccc1"])
    from torch_geometric.data import Batch

    np.testing.assert_allclose(trained.predict(Batch.from_data_list(graphs)).values,
                               trained.predict(["CCO", "c1ccccc1"]).values, rtol=1e-6)
    assert trained.predict(graphs[0]).values.shape == (1, 1)
    with pytest.raises(TypeError, match="single string is ambiguous"):
        trained.predict("CCO")
    with pytest.raises(ValueError, match=r"SMILES 'C1CC\(N' \(input 0\): RDKit cannot parse"):
        trained.graphs(["C1CC(N"])
    with pytest.raises(FeaturizerError, match="the model was trained on zinc: SMILES with 'bench' features.*"
                                              "peptides-func: SMILES with 'ogb' features"):
        trained.dataset_graphs("peptides-func", "test", [0], root=data_dir)


def test_a_model_not_trained_on_smiles_refuses_them_in_one_line(tmp_path):
    ckpt = save_untrained("gin-tree-r2", ["model.hidden=8", "model.layers=1"], tmp_path / "tree.ckpt")
    trained = gea_graph.load_model(ckpt)
    assert trained.featurizer.inputs == "graphs" and trained.target_names == ["class_0", "class_1", "class_2",
                                                                              "class_3"]
    with pytest.raises(FeaturizerError) as err:
        trained.predict(["CCO"])
    assert str(err.value) == ("this model cannot take SMILES: it was trained on tree-r2 (tree-r2 graphs are "
                              "generated trees (TreeNeighbourMatch), not molecules); give it graphs of that dataset "
                              "instead")
    probabilities = trained.predict("tree-r2", split="test", root=tmp_path / "data").values
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_batch_dependent_models_warn_once_and_use_the_recipe_eval_batch_size(tmp_path):
    ckpt = save_untrained("geaet-zinc-quick", ["model.norm_scope=batch", "model.hidden=16", "model.layers=1",
                                               "model.pe.dim=4", "trainer.eval_batch_size=4"], tmp_path / "b.ckpt")
    trained = gea_graph.load_model(ckpt)
    assert trained.batch_dependent
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN", "CCCl", "c1ccncc1", "OCCO", "CC#N", "C=CC"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asked_one = trained.predict(smiles, batch_size=1).values
        asked_two = trained.predict(smiles, batch_size=2).values
    messages = [str(w.message) for w in caught if "norm_scope: batch" in str(w.message)]
    assert len(messages) == 1 and "evaluation batch size 4, not 1" in messages[0]
    np.testing.assert_array_equal(asked_one, asked_two)
    np.testing.assert_array_equal(asked_one, trained.predict(smiles).values)
    # and a batch of 4 graphs does depend on its batch-mates: the first 4 alone differ from the first 4 in 9
    assert not np.allclose(trained.predict(smiles[:2]).values, asked_one[:2], rtol=1e-5, atol=1e-5)


def test_node_level_models_have_no_per_graph_prediction(tmp_path):
    ckpt = save_untrained("gcn-pascalvoc-sp", ["model.hidden=8", "model.layers=1"], tmp_path / "voc.ckpt")
    trained = gea_graph.load_model(ckpt)
    assert trained.target_names[:2] == ["background", "aeroplane"]
    from torch_geometric.data import Data

    graph = Data(x=torch.rand(5, 14), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), edge_attr=torch.rand(3, 2))
    with pytest.raises(ValueError, match="node_classification has no prediction per graph"):
        trained.predict([graph])
    assert trained.embed([graph, graph]).shape == (2, 8)


def test_checkpoints_named_by_path_objects(zinc_run):
    assert gea_graph.load_model(Path(zinc_run) / "checkpoints" / "last.ckpt").path.endswith("last.ckpt")

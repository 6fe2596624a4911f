"""Attention pictures from a model: scores equal the layer's own attention; clear errors."""

from __future__ import annotations

import io

import matplotlib.image
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from gea_graph.diagnostics.collect import collect_node_states
from gea_graph.viz.pictures import atom_attention, attention_picture, check_atom_order
from gea_graph.viz.scores import EXTERNAL_REDUCTIONS, reduce_external

from .helpers import ZINC_SMILES, ToyModel, zinc_graph


@pytest.mark.parametrize("token", [True, False])
def test_self_scores_equal_the_layer_attention(token):
    torch.manual_seed(0)
    model = ToyModel(token=token)
    graphs = [zinc_graph(s) for s in ZINC_SMILES]
    records = atom_attention(model, graphs, "self", layer=2, head=None)
    # read the map straight from the layer, on the layer's own input
    batch = Batch.from_data_list(graphs)
    x_in = collect_node_states(model, batch)[1]
    layer = model.layers[1]
    with torch.no_grad():
        _, attn = layer.attn(*layer.dense_input(x_in, batch.batch), return_attention=True)
    offset = 1 if token else 0
    for b, (graph, record) in enumerate(zip(graphs, records)):
        n = graph.num_nodes
        atoms = attn[b, :, offset : offset + n, offset : offset + n]
        np.testing.assert_allclose(record.scores, atoms.double().mean(1).mean(0).numpy(), rtol=1e-5)
        np.testing.assert_allclose(
            atom_attention(model, [graph], "self", layer=-1, head=1)[0].scores,
            atoms[1].double().mean(0).numpy(),
            rtol=1e-5,
        )
        assert record.layer == 2 and record.smiles == graph.smiles
        if not token:
            assert record.scores.sum() == pytest.approx(1.0, abs=1e-5)


def test_external_scores_equal_the_layer_attention():
    torch.manual_seed(0)
    model = ToyModel()
    graphs = [zinc_graph(s) for s in ZINC_SMILES]
    batch = Batch.from_data_list(graphs)
    x_in = collect_node_states(model, batch)[1]
    with torch.no_grad():
        attn = model.layers[1].external(x_in, batch.batch, return_attention=True)[2]  # [N, H, S]
    for reduction in EXTERNAL_REDUCTIONS:
        records = atom_attention(model, graphs, "external", reduction=reduction)
        for b, record in enumerate(records):
            own = attn[batch.batch == b]
            torch.testing.assert_close(record.attention, own)
            np.testing.assert_allclose(
                record.scores, reduce_external(own, reduction).numpy(), rtol=1e-6
            )
    received = atom_attention(model, graphs[:1], "external", head=0)[0].scores
    own = attn[batch.batch == 0][:, 0]
    np.testing.assert_allclose(received, (own / own.sum(0)).mean(1).numpy(), rtol=1e-5)


def test_picture_for_zinc_molecules():
    torch.manual_seed(0)
    graphs = [zinc_graph(s) for s in ZINC_SMILES]
    pic, records = attention_picture(ToyModel(), graphs, "both", titles=["a", "b", "c"])
    assert len(records) == 6 and pic.titles[:2] == ["a: GEA", "a: self-attn"]
    assert [r.kind for r in records[:2]] == ["external", "self"]
    assert [s.label for s in pic.scales[:2]] == ["GEA score", "self-attention received"]
    assert pic.size[0] == 4 * 300  # two molecules per row, two panels each
    img = matplotlib.image.imread(io.BytesIO(pic.image), format="png")
    assert img.shape[:2] == (pic.size[1], pic.size[0])
    for record, scores in zip(records, pic.scores):
        np.testing.assert_array_equal(record.scores, scores)
    assert "attention the atom receives" in pic.caption and "layer 2 of 2" in pic.caption
    assert "share of the external units' attention" in pic.caption


def test_errors():
    model = ToyModel(external=False)
    graph = zinc_graph(ZINC_SMILES[2])
    with pytest.raises(ValueError, match="has no external attention"):
        atom_attention(model, [graph], "external")
    with pytest.raises(ValueError, match="layer 3 out of range"):
        atom_attention(model, [graph], "self", layer=3)
    with pytest.raises(ValueError, match="unknown attention kind 'cross'"):
        attention_picture(model, [graph], "cross")
    graph.smiles = ZINC_SMILES[0]
    with pytest.raises(ValueError, match="8 nodes but"):
        check_atom_order(graph)

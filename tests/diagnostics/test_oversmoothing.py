"""A deliberately oversmoothed stack: similarity rises toward 1 and the Dirichlet energy falls, layer by layer."""

from __future__ import annotations

import csv

import matplotlib.image
import pytest
import torch
from ogb.utils import smiles2graph
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import SimpleConv

from gea_graph.diagnostics.collect import collect_attention, collect_node_states
from gea_graph.diagnostics.measures import dirichlet_energy, mean_cosine_similarity
from gea_graph.diagnostics.report import (
    LAYER_COLUMNS,
    RESPONSE_COLUMNS,
    diagnose,
    gfsa_coefficients,
    gfsa_eigenvalues,
    layer_table,
    plot_report,
    response_table,
    write_csv,
)
from gea_graph.models import find_layers
from gea_graph.nn.attention import MultiheadAttention, from_dense, to_dense
from gea_graph.nn.attention.gfsa import GFSA, GFSACoefficients
from gea_graph.nn.external_attention import ExternalAttention

ZINC_SMILES = [
    "CC(C)(C)c1ccc2occ(CC(=O)Nc3ccccc3F)c2c1",
    "C[C@@H]1CC(Nc2cncc(-c3nncn3C)c2)C[C@@H](C)C1",
    "N#Cc1ccc(-c2ccc(O[C@@H](C(=O)N3CCCC3)c3ccccc3)cc2)cc1",
]


class MeanStack(nn.Module):
    """Parameter-free mean aggregations (with self loops) of the input features."""

    def __init__(self, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(
            SimpleConv(aggr="mean", combine_root="self_loop") for _ in range(depth)
        )

    def forward(self, batch: Batch) -> torch.Tensor:
        x = batch.x
        for layer in self.layers:
            x = layer(x, batch.edge_index)
        return x


def zinc_batch() -> Batch:
    """Real ZINC molecular graphs with random node features (mean 0.5, std 1)."""
    graphs = []
    for smiles in ZINC_SMILES:
        g = smiles2graph(smiles)
        x = 0.5 + torch.randn(
            g["num_nodes"], 16, generator=torch.Generator().manual_seed(len(graphs))
        )
        graphs.append(Data(x=x, edge_index=torch.from_numpy(g["edge_index"])))
    return Batch.from_data_list(graphs)


def test_similarity_rises_and_energy_falls():
    torch.manual_seed(0)
    model, batch = MeanStack(depth=64), zinc_batch()
    assert find_layers(model) is model.layers
    states = collect_node_states(model, batch)
    assert len(states) == 65 and all(s.shape == (batch.num_nodes, 16) for s in states)
    cos = torch.stack([mean_cosine_similarity(s, batch.batch).mean() for s in states])
    energy = torch.stack(
        [dirichlet_energy(s, batch.edge_index, batch.batch)[1].mean() for s in states]
    )
    assert cos[0] < 0.3 and cos[-1] > 0.95
    assert (cos[1:] >= cos[:-1] - 1e-6).all()
    assert energy[-1] < 0.02 * energy[0]
    assert (energy[1:] <= energy[:-1] + 1e-9).all()


def test_report_tables_csv_and_plot(tmp_path):
    batch = zinc_batch()
    rows = layer_table(MeanStack(depth=8), [batch, batch], "mean8")
    assert [r["layer"] for r in rows] == list(range(9)) and rows[0]["graphs"] == 6
    assert rows[-1]["cosine_similarity"] > rows[0]["cosine_similarity"]
    coefficients = [
        None,
        GFSACoefficients(torch.zeros(2), torch.ones(2), torch.tensor([0.0, -0.5]), K=3.0),
    ]
    eig = {1: [torch.tensor([1.0 + 0j, 0.2 + 0.1j]), torch.tensor([1.0 + 0j, -0.3 + 0j])]}
    response = response_table(coefficients, "gfsa", eig, grid_points=11)
    assert len(response) == 2 * 11 + 4 and {r["layer"] for r in response} == {2}
    vanilla = [r for r in response if r["head"] == 0]
    assert all(
        r["response_re"] == pytest.approx(r["lambda_re"]) for r in vanilla
    )  # w = (0, 1, 0): h(λ) = λ
    write_csv(rows, LAYER_COLUMNS, tmp_path / "layers.csv")
    write_csv(response, RESPONSE_COLUMNS, tmp_path / "frequency_response.csv")
    with (tmp_path / "layers.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 9
    png = plot_report(
        rows + layer_table(MeanStack(depth=8), [batch], "other"), response, tmp_path / "plot.png"
    )
    assert matplotlib.image.imread(png).shape[2] in (3, 4)


class DenseLayer(nn.Module):
    def __init__(self, attn: nn.Module):
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        xd, mask = to_dense(x, batch)
        return x + from_dense(self.attn(xd, mask), mask)


class AttentionStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(
            [DenseLayer(MultiheadAttention(16, 2)), DenseLayer(GFSA(16, 2, K=3))]
        )

    def forward(self, batch: Batch) -> torch.Tensor:
        x = batch.x
        for layer in self.layers:
            x = layer(x, batch.batch)
        return x


def test_gfsa_coefficients_and_eigenvalues():
    torch.manual_seed(0)
    model, batch = AttentionStack(), zinc_batch()
    with torch.no_grad():
        model.layers[1].attn.wK.copy_(torch.tensor([0.0, 0.7]))
    coefficients = gfsa_coefficients(model)
    assert coefficients[0] is None and coefficients[1].K == 3.0
    torch.testing.assert_close(coefficients[1].wK, torch.tensor([0.0, 0.7]))
    eig = gfsa_eigenvalues(model, [batch])
    assert set(eig) == {1} and len(eig[1]) == 2
    assert all(lam.shape == (batch.num_nodes,) for lam in eig[1])
    for lam in eig[1]:  # row-stochastic: spectral radius 1, one eigenvalue 1 per graph
        assert lam.abs().max() <= 1 + 1e-5
        assert int(((lam - 1).abs() < 1e-5).sum()) == batch.num_graphs
    rows = response_table(coefficients, "gfsa", eig)
    points = [r for r in rows if r["source"] == "eigenvalue" and r["head"] == 1]
    expected = model.layers[1].attn.filter_response(eig[1][1])[1]
    got = torch.tensor([complex(r["response_re"], r["response_im"]) for r in points])
    torch.testing.assert_close(got, expected.to(got.dtype))


def test_collect_attention_reads_maps_and_restores_the_model():
    torch.manual_seed(0)
    model, batch = AttentionStack(), zinc_batch()
    model.train()
    softmax, gfsa = model.layers[0].attn, model.layers[1].attn
    pairs = collect_attention(model, [softmax, gfsa], batch)
    _, mask = to_dense(batch.x, batch.batch)
    for attn, got_mask in pairs:
        assert attn.shape == (batch.num_graphs, 2, mask.shape[1], mask.shape[1])
        torch.testing.assert_close(got_mask, mask)
        rows = attn.sum(-1)[mask.unsqueeze(1).expand(-1, 2, -1)]  # each real query's weights sum to 1
        torch.testing.assert_close(rows, torch.ones_like(rows))
    # the maps are those of an ordinary eval-mode forward, and nothing of the capture stays behind
    assert model.training and not softmax.store_attention and not gfsa.store_attention
    assert not softmax._forward_pre_hooks and not gfsa._forward_pre_hooks
    softmax.store_attention = True
    model.eval()
    model(batch)
    torch.testing.assert_close(softmax.attention, pairs[0][0])


def test_collect_attention_external_and_a_module_that_never_runs():
    torch.manual_seed(0)
    batch = zinc_batch()
    unit = ExternalAttention(16, 2)
    model = nn.Module()
    model.unit, model.idle = unit, MultiheadAttention(16, 2)
    model.forward = lambda b: unit(b.x, b.batch)
    ((attn, mask),) = collect_attention(model, [unit], batch)
    assert mask is None and attn.shape[:2] == (batch.num_nodes, 2)
    torch.testing.assert_close(attn.sum(-1), torch.ones(batch.num_nodes, 2))  # rows over the units sum to 1
    with pytest.raises(RuntimeError, match="MultiheadAttention module did not run exactly once"):
        collect_attention(model, [unit, model.idle], batch)
    assert not unit.store_attention and not model.idle.store_attention


def test_diagnose_writes_files_for_two_models(tmp_path):
    torch.manual_seed(0)
    batch = zinc_batch()
    paths = diagnose(
        {"mean": MeanStack(depth=4), "gfsa": AttentionStack()}, [batch], tmp_path / "out"
    )
    with paths["layers"].open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["model"] for r in rows] == ["mean"] * 5 + ["gfsa"] * 3
    with paths["frequency_response"].open() as handle:
        response = list(csv.DictReader(handle))
    assert {r["model"] for r in response} == {"gfsa"} and {r["source"] for r in response} == {
        "grid",
        "eigenvalue",
    }
    assert matplotlib.image.imread(paths["plot"]).ndim == 3

"""Every recipe builds its model and takes one training step on generated graphs with the recipe's data schema;
paper-copy recipes have the paper's parameter count; models do not mutate the batch."""
from pathlib import Path

import pytest
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Batch, Data

from gea_graph.models import ModelConfig, build_model, count_parameters
from gea_graph.train import GraphTask, load_recipe
from gea_graph.train.metrics import prepare
from gea_graph.transforms import parse_pe

RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "models").glob("*.yaml"))


def _cols(dims, n, gen):
    return torch.stack([torch.randint(0, d, (n,), generator=gen) for d in dims], dim=1)


def synthetic_graph(cfg: ModelConfig, num_nodes: int, gen: torch.Generator) -> Data:
    """A random graph with the fields the data schema gives ``cfg``'s dataset."""
    n = num_nodes
    src = torch.arange(1, n)
    dst = torch.randint(0, n, (n - 1,), generator=gen) % torch.arange(1, n)  # a random tree
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    if cfg.node_encoder == "atom":
        x = _cols(get_atom_feature_dims(), n, gen)
    elif cfg.node_encoder == "embedding":
        x = torch.randint(0, cfg.node_vocab, (n, cfg.node_in), generator=gen)
    else:
        x = torch.randn(n, cfg.node_in, generator=gen)
    data = Data(x=x, edge_index=edge_index, num_nodes=n)
    E = edge_index.size(1)
    if cfg.edge_encoder == "bond":
        data.edge_attr = _cols(get_bond_feature_dims(), E, gen)
    elif cfg.edge_encoder == "embedding":
        data.edge_attr = torch.randint(0, cfg.edge_vocab, (E, cfg.edge_in), generator=gen)
    elif cfg.edge_encoder == "linear":
        data.edge_attr = torch.randn(E, cfg.edge_in, generator=gen)
    T = cfg.out_channels
    if cfg.task == "graph_regression":
        data.y = torch.randn(1, T, generator=gen)
    elif cfg.task == "graph_multilabel":
        data.y = torch.randint(0, 2, (1, T), generator=gen).float()
    elif cfg.task in ("graph_classification", "target_node"):
        data.y = torch.randint(0, T, (1,), generator=gen)
    elif cfg.task == "node_classification":
        data.y = torch.randint(0, T, (n,), generator=gen)
    if cfg.task == "target_node":
        data.target_mask = torch.zeros(n, dtype=torch.bool)
        data.target_mask[0] = True
    if cfg.task == "link_ranking":
        data.edge_label_index = torch.randint(0, n, (2, 4), generator=gen)
        data.edge_label = torch.tensor([1, 1, 0, 0])
    return data


def synthetic_batch(recipe, sizes=(5, 9, 7)) -> Batch:
    gen = torch.Generator().manual_seed(0)
    graphs = [synthetic_graph(recipe.model, n, gen) for n in sizes]
    pe = parse_pe(recipe.data.pe)
    if pe is not None:
        graphs = [pe(g) for g in graphs]
    return Batch.from_data_list(graphs)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_builds_and_trains_one_step(name):
    recipe = load_recipe(name)
    if recipe.model.hidden > 256:  # the 48M-parameter PCQM4Mv2 Graphormer: one step at a reduced width
        recipe = load_recipe(name, ["model.hidden=64", "model.heads=4", "model.graphormer.ffn_channels=64"])
    torch.manual_seed(0)
    task = GraphTask(recipe.to_dict())
    batch = synthetic_batch(recipe)
    before = {k: v.clone() for k, v in batch.to_dict().items() if isinstance(v, torch.Tensor)}
    opt = torch.optim.AdamW(task.parameters(), lr=1e-3)
    task.train()
    pred, target = prepare(task.model(batch), batch, task.task)
    loss = task.loss(pred, target) + task.model.aux_loss()
    assert torch.isfinite(loss)
    loss.backward()
    opt.step()
    for key, value in batch.to_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, before[key], rtol=0, atol=0, equal_nan=True,
                                       msg=f"the model changed batch.{key}")  # NaN: GraphGPS LapPE padding
    task.eval()
    with torch.no_grad():
        out = task.model(batch)
    assert torch.isfinite(out).all()
    expected_rows = {"node_classification": batch.num_nodes, "link_ranking": batch.num_nodes}
    assert out.shape == (expected_rows.get(recipe.model.task, batch.num_graphs), recipe.model.out_channels)


PAPER_COPIES = [n for n in RECIPES if (p := load_recipe(n).paper) is not None and p.params is not None]


def test_paper_copies_are_listed():
    assert {"geaet-peptides-struct", "geaet-pascalvoc-sp", "graphormer-gfsa-zinc"} <= set(PAPER_COPIES)


@pytest.mark.parametrize("name", PAPER_COPIES)
def test_paper_parameter_count(name):
    recipe = load_recipe(name)
    count = count_parameters(build_model(recipe.model))
    paper = recipe.paper
    assert abs(count - paper.params) <= paper.params_rtol * paper.params, (count, paper.params)


def test_peptides_struct_count_is_exact():
    assert count_parameters(build_model(load_recipe("geaet-peptides-struct").model)) == 463_211


def test_zinc_geaet_within_budget_and_branches():
    recipe = load_recipe("geaet-zinc")
    model = build_model(recipe.model)
    assert count_parameters(model) <= 500_000
    layer = model.layers[0]
    assert layer.mpnn is not None and layer.attention is not None and layer.gea is not None


def test_geaet_variants_switch_branches():
    base = {"family": "geaet", "task": "graph_regression", "out_channels": 1, "hidden": 32, "layers": 2}
    mpnn_gea = build_model(ModelConfig(**base, mpnn="gcn", attn=None))
    gps = build_model(ModelConfig(**base, mpnn="gine", attn="softmax", gea=False))
    assert mpnn_gea.layers[0].attention is None and mpnn_gea.layers[0].gea is not None
    assert gps.layers[0].gea is None and gps.layers[0].attention is not None


def test_aux_loss_collected_with_weight():
    recipe = load_recipe("graphormer-zinc", ["model.attn=agf", "model.aux_weight=0.5", "model.hidden=32",
                                             "model.layers=2", "model.graphormer.ffn_channels=32"])
    model = build_model(recipe.model)
    model.train()
    model(synthetic_batch(recipe))
    aux = model.aux_loss()
    manual = sum(layer.aux_loss() for layer in model.layers)
    assert torch.allclose(aux, 0.5 * manual)
    assert aux.requires_grad

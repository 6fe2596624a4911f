"""Every recipe builds its model and takes one training step on generated graphs with the recipe's data schema;
paper-copy recipes have the paper's parameter count; models do not mutate the batch."""
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

from gea_graph.models import ModelConfig, build_model, count_parameters
from gea_graph.models.encoders import SUPERPIXEL_STATS
from gea_graph.models.synthetic import synthetic_batch as models_synthetic_batch
from gea_graph.train import GraphTask, load_recipe
from gea_graph.train.metrics import prepare
from gea_graph.train.recipe import RecipeError

RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "models").glob("*.yaml"))


def synthetic_batch(recipe, sizes=(5, 9, 7)) -> Batch:
    """Three random graphs in the data schema of ``recipe`` (its model's inputs and task, its data's PE)."""
    return models_synthetic_batch(recipe.model, recipe.data.pe, sizes)


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
    # Every trainable parameter gets a gradient in one step, so DDP needs no search for unused parameters; the
    # parameters no prediction depends on are frozen instead (and still counted, as the authors count them).
    unused = [n for n, p in task.named_parameters() if p.requires_grad and p.grad is None]
    assert not unused, f"{name}: trainable parameters without a gradient: {unused}"
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


def test_parameters_no_prediction_reads_are_frozen_and_counted():
    # The last GatedGCN layer's edge norm (its edge output is read by nobody) and an edge encoder that no layer reads
    # (GCN on Peptides) take no part in training; they are kept and counted as in the authors' parameter counts.
    frozen = {name: [n for n, p in build_model(load_recipe(name).model).named_parameters() if not p.requires_grad]
              for name in ("geaet-zinc", "geaet-peptides-struct", "graphormer-agf-zinc-cpu", "gps-zinc-cpu")}
    assert frozen["geaet-zinc"] == ["layers.7.mpnn.bn_edge.weight", "layers.7.mpnn.bn_edge.bias"]
    assert frozen["geaet-peptides-struct"] == [f"edge_encoder.bond_embedding_list.{i}.weight" for i in range(3)]
    assert frozen["graphormer-agf-zinc-cpu"] == ["graph_token.distance"]
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


@pytest.mark.parametrize("family", ["graphormer", "geaet"])
def test_agf_orthogonality_loss_on_by_default_and_averaged_over_layers(family):
    # The AGF code adds gamma * mean over layers of L_ortho (gamma inside the attention, `ortho_weight`); before,
    # model.aux_weight defaulted to 0 (the loss was off) and, when on, the layers were summed.
    name = "graphormer-zinc" if family == "graphormer" else "geaet-zinc"
    overrides = ["model.attn=agf", "model.hidden=32", "model.layers=3", "model.heads=4"]
    overrides += ["model.graphormer.ffn_channels=32"] if family == "graphormer" else ["model.pe=null"]
    recipe = load_recipe(name, overrides)
    model = build_model(recipe.model)
    model.train()
    model(synthetic_batch(recipe))
    per_layer = [layer.aux_loss() for layer in model.layers]
    assert all(loss > 0 for loss in per_layer)
    mean = sum(per_layer) / len(per_layer)
    torch.testing.assert_close(model.aux_loss(), mean)
    assert model.aux_loss().requires_grad
    model.cfg.aux_weight = 0.5
    torch.testing.assert_close(model.aux_loss(), 0.5 * mean)
    model.eval()
    model(synthetic_batch(recipe))
    assert model.aux_loss().item() == 0.0


@pytest.mark.parametrize("name", ["gcn-tree-r3", "gin-tree-r3", "gine-tree-r3", "gatedgcn-tree-r3"])
def test_mpnn_baselines_are_not_affine(name):
    # With ffn: false the GCN stack used to have no activation at all: the midpoint of two inputs mapped to the
    # midpoint of their outputs (gap 1.7e-6). The baseline layer is conv -> act -> dropout -> residual -> norm.
    recipe = load_recipe(name)
    model = build_model(recipe.model).eval()
    batch = synthetic_batch(recipe)
    gen = torch.Generator().manual_seed(1)
    x1, x2 = (torch.randn(batch.num_nodes, recipe.model.hidden, generator=gen) for _ in range(2))
    edges = model.constant_edge(batch.edge_index.size(1)) if model.constant_edge is not None else None

    def stack(x):
        e = edges
        for layer in model.layers:
            x, e = layer(x, batch.edge_index, e, batch.batch, num_graphs=batch.num_graphs)
        return x
    with torch.no_grad():
        gap = (stack((x1 + x2) / 2) - (stack(x1) + stack(x2)) / 2).abs().max()
    assert gap > 1e-2, gap


@pytest.mark.parametrize("dataset", ["voc", "coco"])
def test_superpixel_encoders_standardise_with_the_lrgb_constants(dataset):
    # The authors' VOC/COCO encoders standardise the raw features (positions in the hundreds) before the linear
    # map; a feature row equal to the published mean maps to the bias alone.
    overrides = [f"model.node_encoder={dataset}", f"model.edge_encoder={dataset}"]
    model = build_model(load_recipe("geaet-pascalvoc-sp", [] if dataset == "voc" else overrides).model)
    stats = SUPERPIXEL_STATS[dataset]
    for enc, kind in ((model.node_encoder, "node"), (model.edge_encoder, "edge")):
        mean, std = torch.tensor([stats[f"{kind}_mean"]]), torch.tensor([stats[f"{kind}_std"]])
        torch.testing.assert_close(enc(mean), enc.lin.bias.unsqueeze(0))
        x = mean + std * torch.randn(5, mean.size(1))
        torch.testing.assert_close(enc(x), enc.lin((x - mean) / std))
        assert not any(name in ("mean", "std") for name, _ in enc.named_parameters())  # fixed, not learned
    with pytest.raises(ValueError, match="node_in is 3"):
        build_model(load_recipe("geaet-pascalvoc-sp", ["model.node_in=3"]).model)


def test_graphormer_post_ln_is_v2():
    # Graphormer v2 (fairseq, used by GFSA for PCQM4M/v2) is post-LN with a LayerNorm on the embeddings and no final
    # LayerNorm; v1 (GFSA's ZINC code) is pre-LN with a final LayerNorm.
    post = load_recipe("graphormer-gfsa-pcqm4mv2", ["model.hidden=32", "model.heads=4", "model.layers=2",
                                                    "model.graphormer.ffn_channels=32"])
    model = build_model(post.model)
    assert model.final_norm is None and model.embed_norm is not None
    assert all(not layer.pre_norm and layer.activation_dropout == 0.1 for layer in model.layers)
    assert post.model.dropout == 0.0 and post.model.attn_dropout == 0.1
    pre = build_model(load_recipe("graphormer-zinc").model)
    assert pre.final_norm is not None and pre.embed_norm is None and pre.layers[0].pre_norm


# The official GFSA ZINC model (GFSA repo, Graph/Graph_ZINC/graphormer/model.py, zinc.sh: d 80, 12 layers, 8 heads,
# FFN 80, multi_hop): atom Embedding(64, 80) 5,120; edge Embedding(64, 8) 512; edge_dis Embedding(40*8*8, 1) 2,560;
# spatial Embedding(40, 8) 320; in/out degree Embedding(64, 80) 2 x 5,120; 12 layers x (2 LN 320 + q/k/v/out
# 4 x 6,480 + FFN 2 x 6,480 + w_K 8) = 12 x 39,208 = 470,496; final LN 160; out Linear(80, 1) 81; graph token 80 and
# its virtual distance 8: 489,577 (489,481 without GFSA's 96 w_K).
GFSA_ZINC_OFFICIAL = 489_577


def test_gfsa_zinc_matches_the_official_code():
    model = build_model(load_recipe("graphormer-gfsa-zinc").model)
    for layer in model.layers:  # the official GFSA: only w_K learned, w_1 = 1 fixed, no w_0
        assert [n for n, _ in layer.attn.named_parameters() if n.startswith("w")] == ["wK"]
        assert layer.attn.K == 2 and not layer.attn._use_w0
    count = count_parameters(model)
    assert abs(count - GFSA_ZINC_OFFICIAL) <= 0.01 * GFSA_ZINC_OFFICIAL, count
    baseline = count_parameters(build_model(load_recipe("graphormer-zinc").model))
    assert abs(baseline - (GFSA_ZINC_OFFICIAL - 96)) <= 0.01 * GFSA_ZINC_OFFICIAL, baseline
    assert count - baseline == 12 * 8


def test_graphormer_recipe_refuses_data_that_does_not_fit_the_model():
    with pytest.raises(RecipeError, match=r"keeps 20 edges.*max_hops is 30"):
        load_recipe("graphormer-gfsa-zinc", ["model.graphormer.max_hops=30"])
    with pytest.raises(RecipeError, match=r"caps distances at 10.*max_distance is 20"):
        load_recipe("graphormer-zinc", ["data.pe=spd:10"])
    with pytest.raises(RecipeError, match="spd:20"):
        load_recipe("graphormer-zinc", ["data.pe=rw:4"])
    assert load_recipe("graphormer-zinc", ["model.graphormer.max_hops=3"]).model.graphormer.max_hops == 3
    assert load_recipe("graphormer-zinc", ["data.pe=null", "model.attn=agf"]).data.pe is None  # AGF: no bias


# One recipe per family, encoder and attention: a graph's prediction must not depend on its batch-mates, also for a
# one-node graph and a graph without edges (eval mode, per-graph GEA softmax).
SMALL_GRAPH_RECIPES = ["geaet-zinc-quick", "geaet-gfsa-zinc-cpu", "gcn-peptides-func-cpu", "graphormer-zinc-cpu",
                       "graphormer-agf-zinc-cpu", "graphormer-plaplacian-zinc-cpu", "pyg-gps-zinc", "pyg-gine-zinc",
                       "geaet-peptides-struct-pergraph", "gin-tree-r2"]


@pytest.mark.parametrize("name", SMALL_GRAPH_RECIPES)
def test_one_node_and_edgeless_graphs_predict_as_alone(name):
    recipe = load_recipe(name)
    torch.manual_seed(0)
    model = build_model(recipe.model).eval()
    sizes = (1, 6, 1, 3)  # a random tree on 1 node has no edges
    batch = synthetic_batch(recipe, sizes)
    with torch.no_grad():
        together = model(batch)
        alone = [model(Batch.from_data_list([g])) for g in batch.to_data_list()]
    assert torch.isfinite(together).all()
    torch.testing.assert_close(together, torch.cat(alone), rtol=1e-5, atol=1e-5)

"""``model.attn_impl`` (auto | packed | grouped | dense) is reachable from recipes and never changes the function a
model computes: the same predictions and gradients, train and eval; Graphormer built per block equals the dense padded
Graphormer (bias for the whole batch, graph token prepended); the sizes computed on the host make the model
sync-free."""
import pytest
import torch
from test_model_recipes import synthetic_batch

from gea_graph.models.networks import host_sizes
from gea_graph.nn.attention import from_dense, to_dense
from gea_graph.nn.sync_census import SyncCensus
from gea_graph.train import GraphTask, load_recipe
from gea_graph.train.recipe import RecipeError

#: Mixed sizes: a single-node graph and sizes far apart (several blocks in the grouped layout).
SIZES = (5, 9, 1, 7, 23, 12, 2, 30)
SMALL = ["model.hidden=32", "model.layers=2"]


def build(name, impl, extra=()):
    recipe = load_recipe(name, [*SMALL, f"model.attn_impl={impl}", *extra])
    torch.manual_seed(0)
    return GraphTask(recipe.to_dict()).model, recipe


def outputs_and_grads(model, batch, **sizes):
    model.zero_grad(set_to_none=True)
    out = model(batch, **sizes)
    out.float().pow(2).sum().backward()
    return out.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


CASES = [("geaet-zinc-quick", ("grouped", "dense")),
         ("geaet-gfsa-zinc-cpu", ("grouped", "dense")),
         ("graphormer-zinc-cpu", ("grouped", "dense")),
         ("graphormer-gfsa-zinc-cpu", ("grouped", "dense")),
         ("graphormer-plaplacian-zinc-cpu", ("grouped", "dense")),
         ("graphormer-agf-zinc-cpu", ("grouped", "dense"))]


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name, impls", CASES)
def test_every_impl_computes_the_same_function(name, impls, train):
    if not train and name.startswith("graphormer"):
        pytest.skip("no batch norm and no dropout here: evaluation computes what training does")
    # dropout off for the comparison (the random streams differ by layout); the p-Laplacian in float64 (its
    # distance cancellation makes float32 depend on the block size at the 1e-5 level)
    off = ["model.dropout=0.0", "model.attn_dropout=0.0"]
    dtype = torch.float64 if "plaplacian" in name else torch.float32
    ref_model, recipe = build(name, "auto", off)
    batch = synthetic_batch(recipe, SIZES)
    ref = outputs_and_grads(ref_model.to(dtype).train(train), batch)
    for impl in impls:
        model, _ = build(name, impl, off)
        for sizes in ({}, host_sizes(batch)):
            out, grads = outputs_and_grads(model.to(dtype).train(train), batch, **sizes)
            torch.testing.assert_close(out, ref[0], atol=1e-5, rtol=1e-5, msg=f"{name} {impl}")
            assert grads.keys() == ref[1].keys()
            for key, g in grads.items():
                # float32 sums in another order: an entry may be off by a few ulps of the gradient's largest entry
                # (up to ~2e3 in evaluation mode here), more than 1e-5 where the entry itself is small
                scale = float(ref[1][key].abs().max())
                torch.testing.assert_close(g, ref[1][key], atol=1e-5 + 1e-6 * scale, rtol=1e-4,
                                           msg=f"{name} {impl} {key}")


def dense_graphormer(model, batch):
    # The dense padded Graphormer: the bias of the whole batch [B, H, N+1, N+1], the token prepended, every layer on
    # the padded batch (the layout the model ran on before it planned blocks).
    x = model.input_dropout(model.centrality(model.encode_nodes(batch), batch.edge_index))
    x, mask = to_dense(x, batch.batch, batch_size=batch.num_graphs)
    bias = model.attn_bias.forward_data(batch, max_num_nodes=x.size(1)) if model.attn_bias is not None else None
    x, mask, bias = model.graph_token(x, mask, bias)
    bias = bias if model.attn_bias is not None else None
    if model.embed_norm is not None:
        x = model.embed_norm(x)
    for layer in model.layers:
        x = layer(x, mask, bias)
    if model.final_norm is not None:
        x = model.final_norm(x)
    return from_dense(x[:, 1:], mask[:, 1:], batch.num_nodes), x[:, 0]


@pytest.mark.parametrize("name", ["graphormer-zinc-cpu", "graphormer-gfsa-zinc-cpu", "graphormer-agf-zinc-cpu"])
def test_graphormer_per_block_equals_the_dense_padded_graphormer(name):
    model, recipe = build(name, "auto", ["model.dropout=0.0", "model.attn_dropout=0.0"])
    batch = synthetic_batch(recipe, SIZES)
    nodes, graphs = model.embed(batch, **host_sizes(batch))
    ref_nodes, ref_graphs = dense_graphormer(model, batch)
    torch.testing.assert_close(graphs, ref_graphs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nodes, ref_nodes, atol=1e-5, rtol=1e-5)


def test_graphormer_bias_is_built_once_per_block_never_for_the_padded_batch():
    model, recipe = build("graphormer-gfsa-zinc-cpu", "auto")
    batch = synthetic_batch(recipe, SIZES)
    calls = []
    blocks = model.attn_bias.blocks
    model.attn_bias.blocks = lambda layout, *a, **k: calls.append(layout) or blocks(layout, *a, **k)
    model.attn_bias.forward = lambda *a, **k: pytest.fail("the padded [B, H, N, N] bias was built")
    seen = []  # the bias tensor each layer's attention gets, per block
    for layer in model.layers:
        attend = layer.attn.attend
        layer.attn.attend = lambda q, k, v, bias, need, _f=attend: seen.append(bias) or _f(q, k, v, bias, need)
    model(batch, **host_sizes(batch))
    assert len(calls) == 1 and calls[0].grouped and len(calls[0].blocks) > 1  # once for all layers
    blocks = len(calls[0].blocks)
    assert len(seen) == blocks * len(model.layers)
    for b in range(blocks):  # every layer reads the same masked bias of a block: nothing copied per layer
        assert all(seen[i * blocks + b] is seen[b] for i in range(len(model.layers)))


def test_attn_impl_is_a_recipe_key_with_clear_errors():
    assert build("geaet-zinc-quick", "dense")[0].layers[0].attention.impl == "dense"
    assert build("graphormer-zinc-cpu", "grouped")[0].layers[0].attn.impl == "grouped"
    for impl in ("padded", "packed"):
        with pytest.raises(RecipeError, match=f"model.attn_impl: '{impl}' is not one of auto, grouped, dense"):
            load_recipe("geaet-zinc-quick", [f"model.attn_impl={impl}"])


@pytest.mark.parametrize("name", ["geaet-zinc-quick", "geaet-gfsa-zinc-cpu", "graphormer-gfsa-zinc-cpu",
                                  "gatedgcn-geanet-peptides-func", "gcn-transformer-peptides-func-h4",
                                  "geaet-tree-r2"])
def test_a_training_step_given_the_host_sizes_makes_no_host_sync_in_the_model(name):
    model, recipe = build(name, "auto")
    batch = synthetic_batch(recipe, SIZES)
    sizes = host_sizes(batch)
    model.train()
    with SyncCensus() as census:
        out = model(batch, **sizes)
        (out.float().sum() + model.aux_loss()).backward()
    assert census.count == 0, census.report()

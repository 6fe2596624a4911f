"""Fixed-size batches (gea_graph.train.fixed_size): a padded batch gives the unpadded batch's outputs, loss, gradients
and batch-norm statistics for every model family, and a fixed-size training run gives the unpadded run's epochs."""
import copy
import json

import numpy as np
import pytest
import torch

from gea_graph.models import build_model
from gea_graph.models.networks import GraphModel, host_sizes
from gea_graph.models.synthetic import synthetic_batch
from gea_graph.nn.norm import DistributedBatchNorm
from gea_graph.train import fit, load_recipe, read_metrics, recipe_from_dict
from gea_graph.train.fixed_size import (
    FixedShape,
    choose_shape,
    field_kinds,
    pad_batch,
    padding,
    plan_shapes,
    supported,
)
from gea_graph.train.metrics import loss_fn, masked_loss, prepare, resolve_task
from gea_graph.train.module import GraphTask, labelled, real_rows

from .test_training import FAKE

#: One recipe per model family (GEAET, GPS, the MPNNs, Graphormer with and without GFSA, p-Laplacian and AGF
#: attention, PyG's GPS example), and the other tasks: target node (trees), multi-label with LapPE (Peptides-func);
#: GEA's batch-wide softmax (the papers' copies: norm_scope batch, with and without eps).
FAMILIES = ["geaet-zinc-quick", "gps-zinc-cpu", "gcn-zinc-cpu", "gin-zinc-cpu", "gatedgcn-zinc-cpu",
            "gatedgcn-geanet-zinc-cpu", "graphormer-zinc-cpu", "graphormer-gfsa-zinc-cpu",
            "graphormer-plaplacian-zinc-cpu", "graphormer-agf-zinc-cpu", "pyg-gps-zinc", "geaet-tree-r3",
            "gcn-geanet-peptides-func-cpu", "gcn-geanet-peptides-func", "gatedgcn-geanet-zinc"]

#: A one-node graph (no edge), a two-node graph, the largest graph of the shape (10 nodes) and others.
SIZES = (5, 1, 10, 2, 7)
SHAPE = FixedShape(nodes=44, edges=70, graphs=9, max_nodes=10)


def _run(model, batch, max_num_nodes=None):
    if not isinstance(model, GraphModel):
        return model(batch)
    sizes = host_sizes(batch)
    if max_num_nodes is not None:
        sizes["max_num_nodes"] = max_num_nodes
    return model(batch, **sizes)


def _grads(model):
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


@pytest.mark.parametrize("name", FAMILIES)
def test_padded_batch_gives_the_unpadded_outputs_loss_and_gradients(name):
    overrides = ["model.hidden=32", "model.layers=2", "model.dropout=0.0", "model.attn_dropout=0.0"]
    recipe = load_recipe(name, overrides + (["model.aux_weight=0"] if "agf" in name else []))
    assert supported(recipe.model) is None
    torch.manual_seed(0)
    model = DistributedBatchNorm.convert(build_model(recipe.model)).train()
    for module in model.modules():  # every dropout off (random masks take the padded shapes), the layers' own too
        for key, value in list(vars(module).items()):
            if isinstance(value, float) and (key == "p" or key.endswith("dropout")):
                setattr(module, key, 0.0)
    twin = copy.deepcopy(model)
    batch = synthetic_batch(recipe.model, recipe.data.pe, SIZES, seed=1)
    padded = pad_batch(batch, SHAPE)
    assert (padded.num_nodes, padded.edge_index.size(1), padded.num_graphs) == (44, 70, 9)
    loss_name = resolve_task(recipe.model, recipe.trainer.loss, recipe.trainer.metric)[0]
    task = recipe.model.task

    # LapPE's per-graph sign flips: the padded batch draws more of them, its real graphs' first (the same seed)
    torch.manual_seed(5)
    reference = _run(model, batch)
    pred, target = labelled(*prepare(reference, batch, task), task)
    loss = loss_fn(loss_name)(pred, target)
    loss.backward()
    torch.manual_seed(5)
    with padding(padded):
        out = _run(twin, padded, SHAPE.max_nodes)
    assert torch.isfinite(out).all()
    padded_loss = masked_loss(loss_name, *prepare(out, padded, task), real_rows(padded, task))
    padded_loss.backward()

    rows = padded.node_mask if task == "node_classification" else padded.graph_mask
    torch.testing.assert_close(out[rows], reference, atol=1e-5, rtol=1e-5)
    with torch.no_grad(), padding(padded):  # evaluation (as GraphTask runs it): the running statistics
        torch.testing.assert_close(_run(twin.eval(), padded, SHAPE.max_nodes)[rows], _run(model.eval(), batch),
                                   atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(padded_loss, loss, atol=1e-5, rtol=1e-5)
    for a, b in zip(_grads(model), _grads(twin)):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    for a, b in zip(model.buffers(), twin.buffers()):  # batch-norm running statistics (updated once, in training)
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_pad_batch_layout():
    recipe = load_recipe("gatedgcn-zinc-cpu")
    batch = synthetic_batch(recipe.model, recipe.data.pe, SIZES, seed=0)
    before = copy.deepcopy(batch)
    padded = pad_batch(batch, SHAPE)
    # the batch itself is left as it was: its fields, slice and increment records, and graph count
    assert batch.keys() == before.keys() and batch.num_graphs == before.num_graphs == len(SIZES)
    for key, value in before:  # a PyG batch iterates over its (key, value) pairs
        assert torch.equal(batch[key], value) if isinstance(value, torch.Tensor) else batch[key] == value, key

    def records(d):
        return {k: v.tolist() for k, v in d.items() if isinstance(v, torch.Tensor)}

    assert records(batch._slice_dict) == records(before._slice_dict)
    assert records(batch._inc_dict) == records(before._inc_dict)
    counts = padded.ptr.diff()
    assert counts[:len(SIZES)].tolist() == list(SIZES)
    assert (counts[len(SIZES):] >= 1).all() and (counts <= SHAPE.max_nodes).all()  # no empty padding graph
    assert torch.equal(padded.batch, torch.arange(SHAPE.graphs).repeat_interleave(counts))
    assert padded.node_mask.sum() == sum(SIZES) and padded.graph_mask.sum() == len(SIZES)
    assert padded.edge_mask.sum() == batch.edge_index.size(1)
    src, dst = padded.edge_index[:, ~padded.edge_mask]
    assert torch.equal(src, dst) and (src >= sum(SIZES)).all()  # self-loops on padding nodes
    assert torch.equal(padded.edge_index[:, padded.edge_mask], batch.edge_index)
    assert padded.x.shape[0] == SHAPE.nodes and padded.edge_attr.shape[0] == SHAPE.edges
    assert padded.y.shape[0] == SHAPE.graphs
    # the real graphs come back unchanged
    for a, b in zip(batch.to_data_list(), padded.to_data_list()[:len(SIZES)]):
        for key in ("x", "edge_index", "edge_attr", "y"):
            assert torch.equal(a[key], b[key]), key
    with pytest.raises(ValueError, match="does not pad"):
        pad_batch(batch, FixedShape(nodes=26, edges=70, graphs=9, max_nodes=10))


def test_planned_shapes_hold_every_batch_of_a_split():
    rng = np.random.default_rng(0)
    nodes = rng.integers(1, 40, 500)
    edges = 2 * (nodes - 1) + rng.integers(0, 6, 500)
    shapes = plan_shapes(nodes, edges, batch_size=32)
    assert 1 <= len(shapes) <= 3
    for s in shapes:
        assert len({s.nodes, s.edges, s.graphs}) == 3  # batch norm tells the rows apart by their number
    largest = shapes[-1]
    order = np.argsort(-nodes)  # the worst batch: the largest graphs together, and any smaller last batch
    for idx in [order[:32], order[-32:], order[:1], order[-1:], order[:7]] + [rng.choice(500, 32, False)
                                                                            for _ in range(200)]:
        b, n, e, m = len(idx), int(nodes[idx].sum()), int(edges[idx].sum()), int(nodes[idx].max())
        assert largest.fits(b, n, e, m)
        assert any(s.fits(b, n, e, m) for s in shapes)
    assert sum(shapes[0].fits(32, int(nodes[i].sum()), int(edges[i].sum()), int(nodes[i].max()))
               for i in (rng.choice(500, 32, False) for _ in range(200))) > 50  # most batches: the small shape


def test_choose_shape_refuses_a_batch_too_large():
    recipe = load_recipe("gcn-zinc-cpu")
    batch = synthetic_batch(recipe.model, recipe.data.pe, (30, 30), seed=0)
    with pytest.raises(ValueError, match="fits none of the split's fixed shapes"):
        choose_shape([SHAPE], batch)


def test_field_kinds_tell_levels_apart():
    recipe = load_recipe("graphormer-zinc-cpu")
    batch = synthetic_batch(recipe.model, recipe.data.pe, SIZES, seed=0)
    kinds = field_kinds(batch)
    assert kinds["x"] == "node" and kinds["edge_attr"] == "edge" and kinds["y"] == "graph"
    assert kinds["spd"] == "other"  # node pairs: a padding graph has none


@pytest.mark.parametrize("name", ["l1", "mse", "bce", "ce", "wce"])
def test_masked_loss_is_the_loss_of_the_labelled_cells(name):
    gen = torch.Generator().manual_seed(0)
    if name in ("ce", "wce"):
        pred, target = torch.randn(12, 4, generator=gen), torch.randint(0, 4, (12,), generator=gen)
        rows = torch.arange(12) < 9
        ref = loss_fn(name)(pred[:9], target[:9])
    else:
        pred, target = torch.randn(12, 3, generator=gen), torch.randn(12, 3, generator=gen)
        if name == "bce":
            target = (target > 0).float()
        target[2, 1] = target[5, 0] = float("nan")
        rows = torch.arange(12) < 9
        p, t = labelled(pred[:9], target[:9], "graph_regression")
        ref = loss_fn(name)(p, t)
    torch.testing.assert_close(masked_loss(name, pred, target, rows), ref)
    nothing = masked_loss(name, pred, target, torch.zeros(12, dtype=torch.bool))
    assert nothing.item() == 0.0


def test_masked_single_class_wce_is_cross_entropy():
    pred, target = torch.randn(6, 3), torch.full((6,), 2)
    torch.testing.assert_close(masked_loss("wce", pred, target), loss_fn("ce")(pred, target))


def test_unsupported_models_are_refused():
    assert supported(load_recipe("gcn-geanet-peptides-func").model) is None  # GEA's batch-wide softmax: masked
    recipe = load_recipe("graphormer-agf-zinc-cpu")
    assert "AGF" in supported(recipe.model)
    raw = recipe.to_dict()
    raw["trainer"]["fixed_size"] = True
    with pytest.raises(ValueError, match="fixed_size: true cannot pad"):
        GraphTask(raw)
    raw["trainer"]["fixed_size"] = "auto"
    raw["trainer"]["compile"] = "reduce-overhead"
    assert not GraphTask(raw).fixed_size  # auto: off where padding would change results


def _epochs(tmp_path, raw, fixed):
    raw = json.loads(json.dumps(raw))
    raw["trainer"]["fixed_size"] = fixed
    out = tmp_path / str(fixed)
    fit(recipe_from_dict(raw, name="fake"), out, progress=False, verbose=False, accelerator="cpu", devices=1)
    return read_metrics(out / "metrics.csv")


def test_fixed_size_training_epochs_match_unpadded(tmp_path):
    raw = json.loads(json.dumps(FAKE))
    raw["model"]["dropout"] = 0.0
    raw["trainer"]["max_epochs"] = 2
    plain, fixed = _epochs(tmp_path, raw, False), _epochs(tmp_path, raw, True)
    assert len(plain) == len(fixed) == 2
    for a, b in zip(plain, fixed):
        for key in ("train_loss", "val", "test", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)

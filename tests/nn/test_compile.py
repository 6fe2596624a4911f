"""The layers and whole models compile with ``torch.compile(fullgraph=True, dynamic=True)``: no graph breaks (no host
syncs, no data-dependent shapes) given the batch's sizes, and the compiled forward and backward match eager."""
import copy
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo as dynamo

from gea_graph.nn import ExternalAttention, GEAETLayer, GEANet, GraphormerLayer
from gea_graph.nn.attention import from_dense, to_dense
from gea_graph.nn.mpnn import GCNLayer
from gea_graph.selfcheck import ring_batch


def _batch(sizes, d=16, seed=0):
    """Ring graphs of the given sizes (both directions), node and edge features, batch vector."""
    return ring_batch(sizes, d, "cpu", seed)


def _explain(fn, *args, **kwargs):
    dynamo.reset()
    return dynamo.explain(fn)(*args, **kwargs)


def _assert_one_graph(fn, *args, **kwargs):
    ex = _explain(fn, *args, **kwargs)
    reasons = [str(r.reason).splitlines()[0] for r in ex.break_reasons]
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), reasons


def _grads(module):
    # None (a parameter the loss does not reach, e.g. of an unused edge output) counts as zero
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in module.parameters()]


def _check_matches_eager(module, make_inputs, sizes_list, tol=(1e-4, 1e-5), backend="aot_eager"):
    """Compiled (by default aot_eager: the autograd graph inductor would get, without its C++ build) vs eager: outputs
    and parameter gradients, for several batch sizes and graph sizes through one dynamic compilation."""
    eager = module
    compiled_module = copy.deepcopy(module)
    dynamo.reset()
    compiled = torch.compile(compiled_module, fullgraph=True, dynamic=True, backend=backend)
    for sizes in sizes_list:
        args, kwargs = make_inputs(sizes)
        eager.zero_grad()
        compiled_module.zero_grad()
        out_e = eager(*args, **kwargs)
        out_c = compiled(*args, **kwargs)
        out_e = out_e[0] if isinstance(out_e, tuple) else out_e
        out_c = out_c[0] if isinstance(out_c, tuple) else out_c
        torch.testing.assert_close(out_c, out_e, rtol=tol[0], atol=tol[1])
        (out_e * torch.linspace(-1, 1, out_e.numel()).view_as(out_e)).sum().backward()
        (out_c * torch.linspace(-1, 1, out_c.numel()).view_as(out_c)).sum().backward()
        for gc, ge in zip(_grads(compiled_module), _grads(eager)):
            torch.testing.assert_close(gc, ge, rtol=tol[0], atol=tol[1])


def _layer_inputs(sizes):
    x, ei, ea, b = _batch(sizes)
    return (x, ei, ea, b), {"num_graphs": len(sizes), "max_num_nodes": max(sizes)}


def test_external_attention_and_geanet_have_no_graph_break():
    x, ei, ea, b = _batch((3, 5, 4))
    _assert_one_graph(ExternalAttention(16, 4), x, b, num_graphs=3)
    _assert_one_graph(ExternalAttention(16, 4, edge_units=True), x, b, ea, b[ei[0]], num_graphs=3)
    _assert_one_graph(ExternalAttention(16, 4, norm_scope="batch", eps=None), x, b)
    _assert_one_graph(GEANet(16, 4, edge_units=True), x, ei, ea, b, num_graphs=3)


@pytest.mark.parametrize("mpnn,attn", [
    ("gatedgcn", "softmax"), ("gcn", "softmax"), ("gin", "softmax"), ("gine", "softmax"),
    ("gatedgcn", "gfsa"), ("gatedgcn", "plaplacian"), ("gatedgcn", "agf"), ("gcn", None), (None, "softmax"),
])
def test_geaet_layer_has_no_graph_break(mpnn, attn):
    torch.manual_seed(0)
    args, kwargs = _layer_inputs((3, 5, 4))
    _assert_one_graph(GEAETLayer(16, mpnn=mpnn, attn=attn), *args, **kwargs)


@pytest.mark.parametrize("attn", ["softmax", "gfsa", "plaplacian", "agf"])
def test_graphormer_layer_has_no_graph_break(attn):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[0, 3:] = False
    bias = None if attn == "agf" else torch.randn(3, 4, 5, 5)
    _assert_one_graph(GraphormerLayer(16, 4, attn=attn), x, mask, bias)


@pytest.mark.parametrize("mpnn,attn", [("gatedgcn", "softmax"), ("gcn", "gfsa")])
def test_compiled_geaet_layer_matches_eager(mpnn, attn):
    torch.manual_seed(0)
    layer = GEAETLayer(16, mpnn=mpnn, attn=attn, norm="layer_norm")
    _check_matches_eager(layer, _layer_inputs, [(3, 5, 4), (6, 2, 7, 3), (4, 4)])


#: Inductor builds C++ kernels on CPU.
needs_cxx = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                               reason="inductor needs a C++ compiler")


@needs_cxx
def test_attention_compiled_by_inductor_takes_new_batch_sizes():
    # Inductor with dynamic shapes: a saved tensor's stride fixed to the first batch's fails the next batch's assert
    # (tests/train/test_compile_training.py has the models)
    torch.manual_seed(0)
    layer = GEAETLayer(16, mpnn=None, attn="softmax", gea=False)
    _check_matches_eager(layer, _layer_inputs, [(3, 5, 4), (6, 2, 7, 3), (4, 4)], backend="inductor")


@pytest.mark.parametrize("kwargs", [{}, {"norm_scope": "batch", "eps": None}])
def test_compiled_external_attention_matches_eager_with_large_logits(kwargs):
    # logits far outside exp's range: the per-graph max shift keeps the compiled softmax exact, and the authors'
    # epsilon-free L1 step (eps=None) stays exact where p underflows, in both paths
    torch.manual_seed(0)
    att = ExternalAttention(16, 4, **kwargs)
    with torch.no_grad():
        att.node_key.weight.mul_(200.0)

    def inputs(sizes):
        x, _, _, b = _batch(sizes)
        return (x, b), {"num_graphs": len(sizes)}

    _check_matches_eager(att, inputs, [(3, 5, 4), (2, 6)])
    x, _, _, b = _batch((3, 5, 4))
    assert torch.isfinite(att(x, b, num_graphs=3)[0]).all()


def test_dense_round_trip_without_sync():
    x, _, _, b = _batch((3, 5, 4))
    dense, mask = to_dense(x, b, batch_size=3, max_num_nodes=6)  # a bound larger than the largest graph
    assert dense.shape == (3, 6, 16)
    torch.testing.assert_close(from_dense(dense, mask, x.size(0)), x)
    torch.testing.assert_close(from_dense(dense, mask), x)
    _assert_one_graph(lambda x, b: from_dense(*to_dense(x, b, 3, 6), x.size(0)), x, b)


def test_gcn_layer_self_loops_match_pyg():
    from torch_geometric.nn import GCNConv
    x, ei, _, _ = _batch((3, 4))
    ei = torch.cat([ei, torch.tensor([[1, 4, 4], [1, 4, 4]])], dim=1)  # own (and repeated) self loops
    layer = GCNLayer(16)
    ref = GCNConv(16, 16)
    ref.load_state_dict(layer.conv.state_dict())
    torch.testing.assert_close(layer(x, ei)[0], ref(x, ei))


def _recipe_model(name):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from test_model_recipes import synthetic_batch

    from gea_graph.models import build_model
    from gea_graph.train import load_recipe
    recipe = load_recipe(name, ["model.layers=2"])  # two layers: the second call of every layer kind is covered
    torch.manual_seed(0)
    return build_model(recipe.model), lambda sizes: synthetic_batch(recipe, sizes)


@pytest.mark.parametrize("name", ["geaet-zinc-cpu", "graphormer-zinc-cpu"])
def test_compiled_model_matches_eager(name):
    model, make_batch = _recipe_model(name)
    model.eval()  # no dropout: eager and compiled see the same function
    batch = make_batch((5, 9, 7))
    n = int(batch.ptr.diff().max())
    _assert_one_graph(model, batch, max_num_nodes=n)

    def inputs(sizes):
        return (make_batch(sizes), ), {"max_num_nodes": max(sizes)}

    # a whole model sums many more terms in another order: float32 rounding grows with depth
    _check_matches_eager(model, inputs, [(5, 9, 7), (4, 6, 8, 3)], tol=(1e-3, 1e-3))

"""GEANet = Norm(X + Dropout(GEA(X))), edge output of GEA without residual."""
import pytest
import torch

from gea_graph.nn import ExternalAttention, GEANet
from gea_graph.nn.geanet import resolve_norm


def _batch(sizes, channels, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), channels, generator=g, dtype=dtype)
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    ei, start = [], 0
    for n in sizes:
        ei.append(torch.randint(0, n, (2, 2 * n), generator=g) + start)
        start += n
    edge_index = torch.cat(ei, 1)
    return x, batch, edge_index, torch.randn(edge_index.size(1), channels, generator=g, dtype=dtype)


def _naive_norm(norm, h, batch):
    if norm == "batch_norm":  # eval mode: running stats (fresh: mean 0, var 1)
        return h / (1 + 1e-5) ** 0.5
    if norm == "layer_norm":  # per node
        mu = h.mean(-1, keepdim=True)
        var = h.var(-1, unbiased=False, keepdim=True)
        return (h - mu) / (var + 1e-5).sqrt()
    return h


@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm", None])
@pytest.mark.parametrize("edge_units", [False, True])
def test_matches_reference(norm, edge_units):
    torch.manual_seed(0)
    net = GEANet(8, heads=2, units=3, edge_units=edge_units, norm=norm).double().eval()
    x, batch, ei, ea = _batch([3, 4], 8)
    out, e_out = net(x, ei, ea, batch)
    gea, e_gea = net.attention(x, batch, ea, batch[ei[0]])
    torch.testing.assert_close(out, _naive_norm(norm, x + gea, batch))
    if edge_units:
        torch.testing.assert_close(e_out, e_gea)  # no residual, no norm on edges (authors)
    else:
        assert e_out is ea


def test_parameter_count_peptides():
    net = GEANet(224, heads=8, units=28)  # GEA node-only 1,624 + BatchNorm 448
    assert sum(p.numel() for p in net.parameters()) == 1624 + 448
    assert sum(p.numel() for p in GEANet(224, 8, 28, norm=None).parameters()) == 1624


def test_batch_independence_eval_and_batch_scope():
    torch.manual_seed(0)
    net = GEANet(8, heads=2, units=3, edge_units=True).double().eval()
    x, batch, ei, ea = _batch([3, 4, 2], 8, seed=1)
    out, e_out = net(x, ei, ea, batch)
    nodes = batch == 1
    emask = nodes[ei[0]]
    ei1 = ei[:, emask] - 3
    alone, e_alone = net(x[nodes], ei1, ea[emask], None)
    torch.testing.assert_close(out[nodes], alone)
    torch.testing.assert_close(e_out[emask], e_alone)
    coupled = GEANet(8, heads=2, units=3, norm_scope="batch").double().eval()
    out = coupled(x, ei, ea, batch)[0]
    assert not torch.allclose(out[nodes], coupled(x[nodes], ei1, ea[emask], None)[0])


def test_permutation_equivariance_and_no_mutation():
    torch.manual_seed(0)
    net = GEANet(8, heads=2, units=3, edge_units=True, dropout=0.3).double().eval()
    x, batch, ei, ea = _batch([4, 5], 8, seed=2)
    x0, ea0 = x.clone(), ea.clone()
    out, e_out = net(x, ei, ea, batch)
    assert torch.equal(x, x0) and torch.equal(ea, ea0)
    perm = torch.randperm(x.size(0))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    out_p, e_out_p = net(x[perm], inv[ei], ea, batch[perm])
    torch.testing.assert_close(out_p, out[perm])
    torch.testing.assert_close(e_out_p, e_out)


def test_degenerate_train_mode():
    net = GEANet(8, heads=2, edge_units=True, dropout=0.1).train()
    # one single-node graph in training: BatchNorm falls back to running stats instead of failing
    out, _ = net(torch.randn(1, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 8),
                 torch.zeros(1, dtype=torch.long))
    assert torch.isfinite(out).all()
    x = torch.ones(5, 8)  # identical features, a graph without edges, padded-size mix
    batch = torch.tensor([0, 0, 0, 1, 2])
    ei = torch.tensor([[0, 1], [1, 2]])
    out, e_out = net(x, ei, torch.randn(2, 8), batch)
    assert torch.isfinite(out).all() and torch.isfinite(e_out).all()


def test_gradients_autocast_float64():
    torch.manual_seed(0)
    net = GEANet(8, heads=2, units=3, edge_units=True, shared_unit=True, dropout=0.1)
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    out, e_out = net(x, ei, ea, batch)
    (out.square().sum() + e_out.square().sum()).backward()
    for name, p in net.named_parameters():
        if name.endswith("key.bias"):  # cancels in GEA's per-column softmax: its gradient is 0 up to rounding
            assert p.grad is not None and p.grad.abs().max() < 1e-5, name
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = net(x, ei, ea, batch)
    assert torch.isfinite(out).all()
    out, _ = net.double()(x.double(), ei, ea.double(), batch)
    assert out.dtype == torch.float64


def test_attention_map_access():
    net = GEANet(8, heads=2, units=3)
    net.store_attention = True
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    net(x, ei, ea, batch)
    assert net.last_attention.shape == (7, 2, 3)
    assert isinstance(net.attention, ExternalAttention)


def test_norms_and_repr_reset():
    assert isinstance(resolve_norm("layer_norm", 8).module, torch.nn.LayerNorm)  # per node
    assert resolve_norm(None, 8) is None and resolve_norm("none", 8) is None
    gln = resolve_norm("graph_layer_norm", 8)
    x, batch = torch.randn(5, 8), torch.tensor([0, 0, 1, 1, 1])
    assert gln(x, batch).shape == (5, 8)
    assert resolve_norm("graph_norm", 8)(x, batch).shape == (5, 8)
    net = GEANet(8, heads=2, units=3)
    assert str(net) == ("GEANet(8, heads=2, units=3, edge_units=False, shared_unit=False, "
                        "norm_scope='graph', norm='batch_norm')")
    w = net.attention.node_key.weight.clone()
    net.reset_parameters()
    assert not torch.equal(w, net.attention.node_key.weight)

"""GatedGCN against a per-edge loop of its equations; the PyG adapters; the resolver."""
import pytest
import torch
from torch_geometric.nn import GCNConv, GINConv, GINEConv

from gea_graph.nn import (
    GatedGCNLayer,
    GCNLayer,
    GEAETLayer,
    GINELayer,
    GINLayer,
    MPNNBlock,
    mpnn_resolver,
)


def _graph(n=6, e=14, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=dtype), torch.randint(0, n, (2, e), generator=g),
            torch.randn(e, d, generator=g, dtype=dtype))


def _gatedgcn_naive(m, x, ei, ea):
    d = m.channels
    W, b = m.node_lin.weight, m.node_lin.bias
    def unit(k):  # the k-th d x d block of the fused [A | D | B | E] map
        return lambda v: v @ W[k * d:(k + 1) * d].T + b[k * d:(k + 1) * d]

    A, D, B, E = unit(0), unit(1), unit(2), unit(3)
    C = lambda v: v @ m.edge_lin.weight.T + m.edge_lin.bias
    e_hat = torch.zeros_like(ea)
    num = torch.zeros_like(x)
    den = torch.zeros_like(x)
    for k in range(ei.size(1)):
        j, i = ei[0, k].item(), ei[1, k].item()  # message j -> i
        e_hat[k] = D(x[i]) + E(x[j]) + C(ea[k])
        s = torch.sigmoid(e_hat[k])
        num[i] += s * B(x[j])
        den[i] += s
    x_new = A(x) + num / (den + m.eps)
    bn = lambda h: h / (1 + 1e-5) ** 0.5
    return x + torch.relu(bn(x_new)), ea + torch.relu(bn(e_hat))


def test_gatedgcn_matches_naive():
    torch.manual_seed(0)
    m = GatedGCNLayer(8).double().eval()
    x, ei, ea = _graph()
    out, e_out = m(x, ei, ea)
    ref, e_ref = _gatedgcn_naive(m, x, ei, ea)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(e_out, e_ref)


def test_gatedgcn_parameter_count():
    # 5 (d^2 + d) + 2 BatchNorms; the authors' MNIST layer adds the ES gate (3d + 1 = 121) -> 8,481
    assert sum(p.numel() for p in GatedGCNLayer(40).parameters()) == 5 * (40 * 40 + 40) + 160 == 8360


@pytest.mark.parametrize("name", ["gatedgcn", "gcn", "gin", "gine"])
def test_invariances_gradients_dtypes(name):
    torch.manual_seed(0)
    m = mpnn_resolver(name, 8)
    x, ei, ea = _graph(dtype=torch.float32)
    x0, ea0 = x.clone(), ea.clone()
    out, e_out = m(x, ei, ea)
    assert torch.equal(x, x0) and torch.equal(ea, ea0)
    (out.square().sum() + e_out.square().sum()).backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, pname
    m.eval()
    out, e_out = m(x, ei, ea)
    perm = torch.randperm(x.size(0))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    out_p, e_out_p = m(x[perm], inv[ei], ea)
    torch.testing.assert_close(out_p, out[perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(e_out_p, e_out, atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m(x, ei, ea)
    assert torch.isfinite(out).all()
    out, _ = m.double()(x.double(), ei, ea.double())
    assert out.dtype == torch.float64
    # no edges, single node
    out, e_out = m(x.double()[:1], torch.zeros(2, 0, dtype=torch.long), ea.double()[:0])
    assert torch.isfinite(out).all() and e_out.shape == (0, 8)
    m.train()
    out, _ = m(x.double()[:1], torch.zeros(2, 0, dtype=torch.long), ea.double()[:0])
    assert torch.isfinite(out).all()


def test_adapters_equal_pyg():
    x, ei, ea = _graph(dtype=torch.float32)
    gcn = GCNLayer(8)
    assert isinstance(gcn.conv, GCNConv)
    out, e = gcn(x, ei, ea)
    assert e is ea
    # the layer normalises itself (compile-friendly) with the values of GCNConv's own gcn_norm
    ref = GCNConv(8, 8)
    ref.load_state_dict(gcn.conv.state_dict())
    torch.testing.assert_close(out, ref(x, ei))
    loops = torch.cat([ei, torch.tensor([[0, 3], [0, 3]])], dim=1)  # graphs with own self loops
    torch.testing.assert_close(gcn(x, loops)[0], ref(x, loops))
    gin = GINLayer(8)
    assert isinstance(gin.conv, GINConv)
    torch.testing.assert_close(gin(x, ei, None)[0], gin.conv(x, ei))
    gine = GINELayer(8)
    assert isinstance(gine.conv, GINEConv)
    torch.testing.assert_close(gine(x, ei, ea)[0], gine.conv(x, ei, ea))
    with pytest.raises(ValueError):
        gine(x, ei, None)
    with pytest.raises(ValueError):
        GatedGCNLayer(8)(x, ei, None)
    assert sum(p.numel() for p in GCNLayer(224).parameters()) == 50400


def _gcn_naive(layer, x, ei):
    # out_i = b + sum over edges j -> i (and one loop per node) of W x_j / sqrt(d_i d_j), d counting in-edges
    # and the loop; a graph's own loops are replaced by that one loop, as PyG's gcn_norm does
    keep = ei[0] != ei[1]
    src = torch.cat([ei[0][keep], torch.arange(x.size(0))])
    dst = torch.cat([ei[1][keep], torch.arange(x.size(0))])
    deg = torch.zeros(x.size(0), dtype=x.dtype).index_add_(0, dst, torch.ones(dst.numel(), dtype=x.dtype))
    h = layer.conv.lin(x)
    out = torch.zeros_like(h)
    for j, i in zip(src.tolist(), dst.tolist()):
        out[i] += h[j] / (deg[i] * deg[j]).sqrt()
    return out + layer.conv.bias


def _gin_naive(layer, x, ei):
    agg = (1 + layer.conv.eps) * x
    for j, i in zip(ei[0].tolist(), ei[1].tolist()):
        agg = agg.index_add(0, torch.tensor([i]), x[j:j + 1])
    return layer.conv.nn(agg)


@pytest.mark.parametrize("cls", [GCNLayer, GINLayer])
@pytest.mark.parametrize("n, e", [(6, 14), (1, 0), (0, 0), (5, 0)])
def test_gcn_and_gin_equal_a_per_edge_loop_of_their_equations(cls, n, e):
    """GCN and GIN against a per-edge loop of the layer's equation, outputs finite with gradients to every parameter,
    with repeated edges and own self loops, no edges, one node and no nodes."""
    x, ei, _ = _graph(n=n, e=e) if n else (torch.zeros(0, 8, dtype=torch.float64), None, None)
    ei = torch.zeros(2, 0, dtype=torch.long) if ei is None else ei
    if e:
        ei = torch.cat([ei, ei[:, :3], torch.tensor([[2, 2], [2, 2]])], dim=1)
    torch.manual_seed(0)
    layer = (cls(8) if cls is GCNLayer else cls(8, train_eps=True)).double()
    if cls is GINLayer:
        with torch.no_grad():
            layer.conv.eps.fill_(0.3)
    xi = x.clone().requires_grad_(True)
    out = layer(xi, ei)[0]
    naive = _gcn_naive if cls is GCNLayer else _gin_naive
    torch.testing.assert_close(out, naive(layer, x, ei))
    out.backward(torch.arange(out.numel(), dtype=out.dtype).view_as(out).cos())
    if n:
        assert all(p.grad is not None for p in layer.parameters())


def test_resolver_repr_reset():
    assert mpnn_resolver(None, 8) is None
    assert isinstance(mpnn_resolver("GatedGCN", 8), GatedGCNLayer)
    assert isinstance(mpnn_resolver("custom_gated_gcn", 8), GatedGCNLayer)
    layer = GINELayer(8)
    assert mpnn_resolver(layer, 8) is layer
    with pytest.raises(ValueError):
        mpnn_resolver("gat2", 8)
    assert str(GatedGCNLayer(8, dropout=0.1)) == "GatedGCNLayer(8, dropout=0.1, residual=True)"
    assert str(GCNLayer(8)) == "GCNLayer(GCNConv(8, 8))"
    for m in (GatedGCNLayer(8), GCNLayer(8), GINLayer(8), GINELayer(8)):
        w = max(m.parameters(), key=lambda t: t.dim())  # a weight matrix, not a zero bias
        p = w.detach().clone()
        m.reset_parameters()
        assert not torch.equal(p, w)


@pytest.mark.parametrize("name", ["gatedgcn", "gin", "gine"])
def test_layer_activation_reaches_the_mpnn(name):
    # The authors' code (GraphGPS GPSLayer / GEAET) hands the layer's activation to GatedGCN's node and edge
    # updates and to the GIN/GINE MLPs; before, GatedGCN and the MLPs always used ReLU.
    layer = GEAETLayer(8, mpnn=name, attn=None, gea=False, act="gelu")
    acts = [m for m in layer.mpnn.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.GELU))]
    assert acts and all(isinstance(m, torch.nn.GELU) for m in acts), acts
    assert all(isinstance(m, torch.nn.ReLU) for m in mpnn_resolver(name, 8).modules()
               if isinstance(m, (torch.nn.ReLU, torch.nn.GELU)))  # the default stays ReLU
    with pytest.raises(TypeError):
        mpnn_resolver("gcn", 8, act="gelu", bogus=1)


def test_gin_mlp_activation_in_the_forward():
    torch.manual_seed(0)
    x, ei, _ = _graph(dtype=torch.float32)
    gin = GINLayer(8, act="gelu")
    lin1, lin2 = gin.conv.nn[0], gin.conv.nn[2]
    agg = x.clone().index_add_(0, ei[1], x[ei[0]])  # (1 + eps) x_i + sum_j x_j, eps = 0
    torch.testing.assert_close(gin(x, ei)[0], lin2(torch.nn.functional.gelu(lin1(agg))))


@pytest.mark.parametrize("name", ["gcn", "gin", "gine"])
def test_baseline_block_is_conv_act_dropout_residual_norm(name):
    # LRGB / GraphGPS baseline layer (GCNConvLayer, GINEConvLayer): x' = Norm(x + Dropout(act(MPNN(x)))).
    torch.manual_seed(0)
    block = MPNNBlock(8, name, act="gelu", norm="batch_norm").eval()
    x, ei, ea = _graph(dtype=torch.float32)
    with torch.no_grad():  # non-trivial norm statistics
        block.norm.module.running_mean.uniform_(-1, 1)
        block.norm.module.running_var.uniform_(0.5, 2)
    h, e = block.mpnn(x, ei, ea)
    ref = block.norm(x + torch.nn.functional.gelu(h), None, 1)
    out, e_out = block(x, ei, ea)
    torch.testing.assert_close(out, ref)
    assert e_out is e
    # not affine: the midpoint of two inputs does not map to the midpoint of their outputs
    x2 = torch.randn_like(x)
    mid = block((x + x2) / 2, ei, ea)[0]
    assert not torch.allclose(mid, (block(x, ei, ea)[0] + block(x2, ei, ea)[0]) / 2, atol=1e-4)


def test_baseline_block_gatedgcn_is_the_layer_itself():
    block = MPNNBlock(8, "gatedgcn", act="gelu", dropout=0.2)
    assert block.norm is None and isinstance(block.mpnn, GatedGCNLayer)
    assert block.mpnn.dropout == 0.2 and isinstance(block.mpnn.act, torch.nn.GELU)
    assert MPNNBlock(8, "gatedgcn", norm=None).mpnn.bn_node is None
    with pytest.raises(ValueError, match="layer_norm"):
        MPNNBlock(8, "gatedgcn", norm="layer_norm")
    assert "MPNNBlock" in repr(block)

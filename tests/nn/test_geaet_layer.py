"""GEAETLayer: composition of the branches (against a per-graph loop), parameter counts of the
paper, invariances, degenerate batches, every attention name."""
import pytest
import torch

from gea_graph.nn import GEAETLayer


def _batch(sizes, d=8, dtype=torch.float64, seed=0, edges_per_node=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), d, generator=g, dtype=dtype)
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    ei, start = [], 0
    for n in sizes:
        ei.append(torch.randint(0, n, (2, edges_per_node * n), generator=g) + start)
        start += n
    ei = torch.cat(ei, 1)
    return x, ei, torch.randn(ei.size(1), d, generator=g, dtype=dtype), batch


def _naive_layer(m, x, ei, ea):
    """One graph, from the equations of the docstring, calling the branch modules directly."""
    norm = lambda n, h: h if n is None else n(h)
    hs, e = [], ea
    if m.mpnn is not None:
        h, e = m.mpnn(x, ei, ea)
        if m.local_out_act:
            h = m.act(h)
        if not getattr(m.mpnn, "includes_residual", False):
            h = x + h
        hs.append(norm(m.norm_local, h))
    if m.attention is not None:
        mask = torch.ones(1, x.size(0), dtype=torch.bool)
        hs.append(norm(m.norm_attn, x + m.attention(x[None], mask)[0]))
    if m.gea is not None:
        att = m.gea.attention
        g, e = att(x, None, e)
        hs.append(norm(m.gea.norm, x + g))
    h = sum(hs)
    if m.ffn_in is not None:
        h = h + m.ffn_out(m.act(m.ffn_in(h)))
    return norm(m.norm_out, h), e


CONFIGS = [
    {"mpnn": "gatedgcn", "attn": "softmax"},
    {"mpnn": "gcn", "attn": None, "local_out_act": True, "act": "gelu", "use_ffn": False},
    {"mpnn": "gine", "attn": "softmax", "gea": False},
    {"mpnn": None, "attn": "softmax", "edge_units": True, "shared_unit": True, "norm": "layer_norm"},
    {"mpnn": "gin", "attn": None, "units": 3, "gea_heads": 4, "norm": None},
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_matches_per_graph_reference(cfg):
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, **cfg).double().eval()
    x, ei, ea, batch = _batch([3, 1, 5])
    out, e_out = m(x, ei, ea, batch)
    assert out.shape == x.shape and e_out.shape == ea.shape
    eb = batch[ei[0]]
    for g, start in ((0, 0), (1, 3), (2, 4)):
        nodes, edges = batch == g, eb == g
        ref, e_ref = _naive_layer(m, x[nodes], ei[:, edges] - start, ea[edges])
        torch.testing.assert_close(out[nodes], ref)
        torch.testing.assert_close(e_out[edges], e_ref)


def test_parameter_counts_of_the_paper():
    count = lambda m: sum(p.numel() for p in m.parameters())
    # Peptides-Struct: GCN(224) + GEANet(8 heads, S=28, node-only) + 3 BatchNorms, no FFN/attention
    pep = GEAETLayer(224, mpnn="gcn", attn=None, gea_heads=8, units=28, use_ffn=False,
                     local_out_act=True, act="gelu")
    assert count(pep.mpnn) == 50400
    assert count(pep.gea.attention) == 1624
    assert count(pep) - 50400 - 1624 == 1344  # norm_local, GEANet's norm, norm_out
    assert count(pep) == 53368
    # MNIST: GatedGCN + MHA(4 heads) + GEANet(node-only, S=10) at d=40 with FFN. The authors' 22,101
    # includes the EquivStable-LapPE gate of their GatedGCN (MLP 1->d->1: 3d+1 = 121 parameters),
    # which ours does not have:
    d = 40
    mnist = GEAETLayer(d, mpnn="gatedgcn", attn="softmax", heads=4, units=10)
    gatedgcn = 5 * (d * d + d) + 2 * 2 * d  # 8,360
    mha = 4 * (d * d + d)  # 6,560
    gea = 2 * (10 * 10 + 10)  # 220
    norms = 4 * 2 * d  # 3 branch norms + output norm: 320
    ffn = (d * 2 * d + 2 * d) + (2 * d * d + d)  # 6,520
    assert count(mnist) == gatedgcn + mha + gea + norms + ffn == 22101 - (3 * d + 1) == 21980


def test_batch_mates_and_permutation():
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, edge_units=True).double().eval()
    x, ei, ea, batch = _batch([4, 3], seed=1)
    x2, ei2, ea2, batch2 = _batch([4, 6, 2], seed=2)
    # replace graph 0 of the second batch by graph 0 of the first (same sizes: 4 nodes, 8 edges)
    x2[:4], ea2[:8], ei2[:, :8] = x[:4], ea[:8], ei[:, :8]
    out, e_out = m(x, ei, ea, batch)
    out2, e_out2 = m(x2, ei2, ea2, batch2)
    torch.testing.assert_close(out[:4], out2[:4])
    torch.testing.assert_close(e_out[:8], e_out2[:8])
    # permute the nodes inside each graph (PyG batches keep 'batch' sorted)
    perm = torch.cat([torch.randperm(4), 4 + torch.randperm(3)])
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    out_p, e_out_p = m(x[perm], inv[ei], ea, batch[perm])
    torch.testing.assert_close(out_p, out[perm])
    torch.testing.assert_close(e_out_p, e_out)


def test_batch_scope_couples():
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, mpnn=None, attn=None, norm_scope="batch").double().eval()
    x, ei, ea, batch = _batch([4, 3], seed=1)
    out, _ = m(x, ei, ea, batch)
    assert not torch.allclose(out[:4], m(x[:4], ei[:, :8], ea[:8], None)[0])


def test_degenerate_batches_train_and_eval():
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, edge_units=True, dropout=0.1, attn_dropout=0.1)
    # single-node graphs, a graph without edges, identical features, very uneven sizes (padding)
    x = torch.ones(9, 8)
    batch = torch.tensor([0, 1, 1, 1, 1, 1, 1, 2, 3])
    ei = torch.tensor([[1, 2, 3, 4], [2, 3, 4, 5]])
    ea = torch.randn(4, 8)
    for mode in (True, False):
        m.train(mode)
        out, e_out = m(x, ei, ea, batch)
        assert torch.isfinite(out).all() and torch.isfinite(e_out).all()
    m.train()
    out, _ = m(torch.randn(1, 8), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 8), None)
    assert torch.isfinite(out).all()


def test_gradients_dtypes_autocast_no_mutation():
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, edge_units=True, shared_unit=True, dropout=0.1)
    x, ei, ea, batch = _batch([3, 4, 2], dtype=torch.float32)
    x0, ea0 = x.clone(), ea.clone()
    out, e_out = m(x, ei, ea, batch)
    assert torch.equal(x, x0) and torch.equal(ea, ea0)
    (out.square().sum() + e_out.square().sum()).backward()
    for name, p in m.named_parameters():
        if name.endswith("key.bias") and ".gea." in f".{name}":  # cancels in GEA's softmax: 0 up to rounding
            assert p.grad is not None and p.grad.abs().max() < 1e-5, name
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, e_out = m(x, ei, ea, batch)
    assert torch.isfinite(out).all() and torch.isfinite(e_out).all()
    out, _ = m.double()(x.double(), ei, ea.double(), batch)
    assert out.dtype == torch.float64


@pytest.mark.parametrize("attn", ["softmax", "gfsa", "plaplacian", "agf"])
def test_every_attention_name(attn):
    torch.manual_seed(0)
    try:
        m = GEAETLayer(8, heads=2, attn=attn)
    except (ImportError, AttributeError) as err:  # a colleague's module not there yet
        pytest.skip(f"{attn} not available: {err}")
    x, ei, ea, batch = _batch([3, 5], dtype=torch.float32)
    out, _ = m(x, ei, ea, batch)
    assert torch.isfinite(out).all()
    aux = m.aux_loss()
    if hasattr(m.attention, "aux_loss"):
        assert aux is not None and torch.isfinite(aux).all()
        (out.sum() + aux).backward()
    else:
        assert aux is None


def test_attn_bias_and_errors():
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2).eval()
    x, ei, ea, batch = _batch([3, 5], dtype=torch.float32)
    bias = torch.zeros(2, 2, 5, 5)
    torch.testing.assert_close(m(x, ei, ea, batch, attn_bias=bias)[0], m(x, ei, ea, batch)[0])
    bias[:, :, :, 0] = -1e9  # no node attends to node 0 of each graph
    assert not torch.allclose(m(x, ei, ea, batch, attn_bias=bias)[0], m(x, ei, ea, batch)[0])
    with pytest.raises(ValueError):
        GEAETLayer(8, heads=2, attn=None)(x, ei, ea, batch, attn_bias=bias)
    with pytest.raises(ValueError):
        GEAETLayer(8, mpnn=None, attn=None, gea=False)


def test_attention_maps_repr_reset():
    m = GEAETLayer(8, heads=2, units=3)
    m.store_attention = True
    assert m.store_attention
    x, ei, ea, batch = _batch([3, 5], dtype=torch.float32)
    m(x, ei, ea, batch)
    assert m.gea.last_attention.shape == (8, 2, 3)
    assert m.attention.attention.shape == (2, 2, 5, 5)
    assert str(m) == ("GEAETLayer(8, mpnn='gatedgcn', attn='softmax', gea=GEA(heads=2, units=3, "
                      "edge_units=False, shared_unit=False, norm_scope='graph', eps=1e-09), heads=2, "
                      "norm='batch_norm', use_ffn=True, dropout=0.0)")
    authors = GEAETLayer(8, mpnn="gcn", attn=None, heads=2, local_dropout=0.1, external_dropout=0.05,
                         gea_kwargs={"eps": None})
    assert str(authors).endswith("eps=None), heads=2, norm='batch_norm', use_ffn=True, local_dropout=0.1, "
                                 "global_dropout=0.0, external_dropout=0.05, ffn_dropout=0.0)")
    w = m.ffn_in.weight.detach().clone()
    m.reset_parameters()
    assert not torch.equal(w, m.ffn_in.weight)


@pytest.mark.parametrize("norm", ["layer_norm", "graph_layer_norm", "graph_norm", None])
def test_norm_choices(norm):
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, norm=norm)
    x, ei, ea, batch = _batch([3, 5], dtype=torch.float32)
    out, _ = m(x, ei, ea, batch)
    assert torch.isfinite(out).all()
    if norm == "layer_norm":  # per node: every output row is normalised on its own
        torch.testing.assert_close(out.mean(-1), torch.zeros(8), atol=1e-5, rtol=0)


def _disconnected():
    """One graph of three components: a path 0-1-2, an edge 3-4 and an isolated node 5 (both directions stored)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    return x, ei, torch.randn(6, 8, generator=g, dtype=torch.float64), torch.zeros(6, dtype=torch.long)


@pytest.mark.parametrize("cfg", [{"mpnn": "gatedgcn", "attn": None, "gea": False},
                                 {"mpnn": None, "attn": "softmax", "gea": False},
                                 {"mpnn": None, "attn": None, "gea": True},
                                 {"mpnn": "gine", "attn": "softmax", "edge_units": True}])
def test_disconnected_graph(cfg):
    """A disconnected graph is one graph: the MPNN (Eq. 9) never crosses a component, while the global attention
    (Eq. 1) and GEA's softmax over the graph's nodes (Eq. 3) span all of them. It matches the per-graph reference."""
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, **cfg).double().eval()
    x, ei, ea, batch = _disconnected()
    out, e_out = m(x, ei, ea, batch)
    ref, e_ref = _naive_layer(m, x, ei, ea)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(e_out, e_ref)
    x2 = x.clone()
    x2[3:] += 1.0  # change the other components only
    out2, _ = m(x2, ei, ea, batch)
    crosses = cfg["attn"] is not None or cfg["gea"]
    assert crosses != torch.allclose(out2[:3], out[:3])
    if cfg.get("edge_units"):  # GEA's edge softmax runs over all edges of the graph (Eq. 4)
        ea2 = ea.clone()
        ea2[4:] += 1.0  # the edges of component {3, 4}
        assert not torch.allclose(m(x, ei, ea2, batch)[1][:4], e_out[:4])
    if not crosses:  # local only: the component {0, 1, 2} alone gives the same rows
        alone, _ = m(x[:3], ei[:, :4], ea[:4], None)
        torch.testing.assert_close(out[:3], alone)


def test_batch_without_any_edge_train_and_eval():
    """Graphs with no edges at all (the whole batch has none): every branch runs, matches the per-graph reference in
    evaluation, and gradients reach every parameter that the empty edge set leaves in use."""
    torch.manual_seed(0)
    m = GEAETLayer(8, heads=2, edge_units=True, shared_unit=True).double()
    x, _, _, batch = _batch([3, 1, 4])
    ei, ea = torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 8, dtype=torch.float64)
    m.eval()
    out, e_out = m(x, ei, ea, batch)
    assert e_out.shape == (0, 8)
    for g, start, n in ((0, 0, 3), (1, 3, 1), (2, 4, 4)):
        ref, _ = _naive_layer(m, x[start:start + n], ei, ea)
        torch.testing.assert_close(out[start:start + n], ref)
    m.train()
    out, e_out = m(x, ei, ea, batch)
    out.square().sum().backward()
    assert torch.isfinite(out).all()
    # without edges GatedGCN's edge map and edge norm and GEA's edge units see nothing (and GEA's key biases cancel
    # in its softmax); every other parameter still trains
    for name, p in m.named_parameters():
        if name.startswith(("gea.attention.edge_", "mpnn.edge_lin.", "mpnn.bn_edge.")) or name.endswith("key.bias"):
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, name

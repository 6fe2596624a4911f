import pytest
import torch
from torch_geometric.data import Batch, Data

from gea_graph.nn.attention import to_dense
from gea_graph.nn.graphormer import (
    CentralityEncoding,
    EdgeEncoding,
    GraphormerAttnBias,
    GraphormerLayer,
    GraphToken,
    SpatialEncoding,
    batch_edge_offsets,
)
from gea_graph.transforms import ShortestPathDistance, parse_pe

MAXD = 4
U = MAXD + 1  # unreachable bucket


def tiny_graph():
    """Path 0-1-2 plus isolated node 3; edge ids e0: 0->1, e1: 1->0, e2: 1->2, e3: 2->1."""
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    spd = torch.tensor([[0, 1, 2, U], [1, 0, 1, U], [2, 1, 0, U], [U, U, U, 0]])
    paths = {(0, 1): [0], (0, 2): [0, 2], (1, 0): [1], (1, 2): [2], (2, 0): [3, 1], (2, 1): [3]}
    ii, jj = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    spd_path = torch.full((16, 5), -1)  # width 5 = the default max_hops
    for (i, j), p in paths.items():
        spd_path[i * 4 + j, :len(p)] = torch.tensor(p)
    edge_attr = torch.tensor([[1, 0], [1, 0], [2, 1], [2, 1]])
    return Data(x=torch.randn(4, 6), edge_index=edge_index, edge_attr=edge_attr,
                spd_index=torch.stack([ii.flatten(), jj.flatten()]), spd=spd.flatten(),
                spd_path=spd_path, num_nodes=4)


def triangle():
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    ii, jj = torch.meshgrid(torch.arange(3), torch.arange(3), indexing="ij")
    spd = (ii != jj).long().flatten()
    eid = {(0, 1): 0, (1, 0): 1, (1, 2): 2, (2, 1): 3, (2, 0): 4, (0, 2): 5}
    spd_path = torch.full((9, 5), -1)
    for (i, j), e in eid.items():
        spd_path[i * 3 + j, 0] = e
    return Data(x=torch.randn(3, 6), edge_index=edge_index,
                edge_attr=torch.tensor([[0, 1], [0, 1], [3, 0], [3, 0], [1, 1], [1, 1]]),
                spd_index=torch.stack([ii.flatten(), jj.flatten()]), spd=spd, spd_path=spd_path,
                num_nodes=3)


def test_centrality_hand_computed():
    g = tiny_graph()
    enc = CentralityEncoding(6, max_degree=1)
    out = enc(g.x, g.edge_index)
    deg = torch.tensor([1, 1, 1, 0])  # node 1 has degree 2, clamped to max_degree = 1
    torch.testing.assert_close(out, g.x + enc.in_degree.weight[deg] + enc.out_degree.weight[deg])
    assert enc.in_degree.weight[0].abs().sum() > 0  # degree 0 is a learned bucket, not padding
    assert "max_degree=1" in repr(enc)


def test_spatial_hand_computed():
    g = tiny_graph()
    enc = SpatialEncoding(2, max_distance=MAXD)
    batch = torch.zeros(4, dtype=torch.long)
    dense = enc(g.spd_index, g.spd, batch)
    assert dense.shape == (1, 2, 4, 4)
    W = enc.embedding.weight
    for i in range(4):
        for j in range(4):
            torch.testing.assert_close(dense[0, :, i, j], W[g.spd.view(4, 4)[i, j]])
    torch.testing.assert_close(dense[0, :, 0, 3], W[U])  # unreachable: its own bucket


def test_edge_encoding_hand_computed():
    g = tiny_graph()
    enc = EdgeEncoding(2, edge_dim=2, num_edge_types=3, max_hops=5)
    batch = torch.zeros(4, dtype=torch.long)
    dense = enc(g.edge_attr, g.edge_index, g.spd_index, g.spd, g.spd_path, batch)
    E = enc.encoder.weight  # column c uses rows c * 3 + value

    def x_e(e):
        a = g.edge_attr[e]
        return (E[a[0]] + E[3 + a[1]]) / 2
    Wn = enc.hop_weight
    torch.testing.assert_close(dense[0, :, 0, 1], x_e(0) @ Wn[0])
    torch.testing.assert_close(dense[0, :, 0, 2], (x_e(0) @ Wn[0] + x_e(2) @ Wn[1]) / 2)
    torch.testing.assert_close(dense[0, :, 2, 0], (x_e(3) @ Wn[0] + x_e(1) @ Wn[1]) / 2)
    for i, j in [(0, 0), (1, 1), (0, 3), (3, 2), (3, 3)]:
        assert dense[0, :, i, j].abs().sum() == 0
    # max_hops = 1: only the first edge, divided by min(spd, 1)
    enc1 = EdgeEncoding(2, edge_dim=2, num_edge_types=3, max_hops=1)
    enc1.encoder.load_state_dict(enc.encoder.state_dict())
    with torch.no_grad():
        enc1.hop_weight.copy_(enc.hop_weight[:1])
    d1 = enc1(g.edge_attr, g.edge_index, g.spd_index, g.spd, g.spd_path, batch)
    torch.testing.assert_close(d1[0, :, 0, 2], x_e(0) @ Wn[0])
    # continuous edge features through a linear map
    encf = EdgeEncoding(2, edge_dim=2)
    df = encf(g.edge_attr.float(), g.edge_index, g.spd_index, g.spd, g.spd_path, batch)
    torch.testing.assert_close(df[0, :, 0, 1], encf.encoder(g.edge_attr[0].float()) @ encf.hop_weight[0])


def test_batch_offsets_and_bias_independent_of_batch():
    a, b = triangle(), tiny_graph()
    batch = Batch.from_data_list([a, b, Data(x=torch.randn(1, 6), edge_index=torch.empty(2, 0, dtype=torch.long),
                                             edge_attr=torch.empty(0, 2, dtype=torch.long),
                                             spd_index=torch.zeros(2, 1, dtype=torch.long),
                                             spd=torch.zeros(1, dtype=torch.long),
                                             spd_path=torch.full((1, 5), -1), num_nodes=1)])
    assert batch_edge_offsets(batch.edge_index, batch.batch, 3).tolist() == [0, 6, 10]
    builder = GraphormerAttnBias(2, max_distance=MAXD, edge_dim=2, num_edge_types=4, max_hops=3)
    full = builder.forward_data(batch)
    assert full.shape == (3, 2, 4, 4)
    alone = builder.forward_data(Batch.from_data_list([b]))
    torch.testing.assert_close(full[1], alone[0])
    alone_a = builder.forward_data(Batch.from_data_list([a]))
    torch.testing.assert_close(full[0, :, :3, :3], alone_a[0])
    assert full[0, :, 3, :].abs().sum() == 0 and full[0, :, :, 3].abs().sum() == 0  # padding
    with pytest.raises(ValueError):
        builder(batch.spd_index, batch.spd, batch.batch)
    # spatial only
    sp = GraphormerAttnBias(2, max_distance=MAXD)
    torch.testing.assert_close(sp.forward_data(batch), sp.spatial(batch.spd_index, batch.spd, batch.batch))


def test_graph_token():
    tok = GraphToken(6, 2)
    x = torch.randn(2, 3, 6)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    bias = torch.randn(2, 2, 3, 3)
    x2, m2, b2 = tok(x, mask, bias)
    assert x2.shape == (2, 4, 6) and m2.shape == (2, 4) and b2.shape == (2, 2, 4, 4)
    torch.testing.assert_close(x2[:, 0], tok.token.expand(2, 6))
    torch.testing.assert_close(x2[:, 1:], x)
    assert m2[:, 0].all() and torch.equal(m2[:, 1:], mask)
    t = tok.distance
    torch.testing.assert_close(b2[:, :, 1:, 1:], bias)
    torch.testing.assert_close(b2[:, :, 0, :], t.view(1, 2, 1).expand(2, 2, 4))
    torch.testing.assert_close(b2[:, :, 1:, 0], t.view(1, 2, 1).expand(2, 2, 3))
    _, _, b3 = tok(x, mask)
    torch.testing.assert_close(b3[:, :, 0, 0], t.expand(2, 2))
    assert b3[:, :, 1:, 1:].abs().sum() == 0


@pytest.mark.parametrize("pre_norm", [True, False])
def test_layer_matches_equations(pre_norm):
    torch.manual_seed(0)
    layer = GraphormerLayer(8, 2, ffn_channels=16, pre_norm=pre_norm).double()
    x, mask = to_dense(torch.randn(7, 8, dtype=torch.float64), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    bias = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    out = layer(x, mask, bias)
    att, ffn, n1, n2 = layer.attn, layer.ffn, layer.norm1, layer.norm2
    if pre_norm:
        h = x + att(n1(x), mask, bias)
        ref = h + ffn(n2(h))
    else:
        h = n1(x + att(x, mask, bias))
        ref = n2(h + ffn(h))
    torch.testing.assert_close(out[mask], ref[mask])
    assert (out[~mask] == 0).all()
    assert "pre_norm" in repr(layer)


@pytest.mark.parametrize("attn", ["softmax", "gfsa", "plaplacian", "agf"])
def test_layer_variants(attn):
    torch.manual_seed(0)
    layer = GraphormerLayer(8, 2, attn=attn, dropout=0.1, attn_dropout=0.1).train()
    x, mask = to_dense(torch.randn(7, 8), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    bias = None if attn == "agf" else torch.randn(2, 2, 4, 4)
    out = layer(x, mask, bias)
    (out.sum() + layer.aux_loss()).backward()
    assert all(p.grad is not None for p in layer.parameters())
    assert torch.isfinite(out).all()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(layer.eval()(x, mask, bias).float()).all()
    if attn == "agf":
        with pytest.raises(ValueError):
            layer(x, mask, torch.zeros(2, 2, 4, 4))


def test_gfsa_layer_starts_as_graphormer():
    torch.manual_seed(0)
    soft = GraphormerLayer(8, 2, attn="softmax").double()
    gf = GraphormerLayer(8, 2, attn="gfsa", attn_kwargs={"K": 2, "learn": "wK"}).double()
    gf.load_state_dict(soft.state_dict(), strict=False)
    x, mask = to_dense(torch.randn(7, 8, dtype=torch.float64), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    bias = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(gf(x, mask, bias), soft(x, mask, bias))


def test_end_to_end_pipeline_batch_independent():
    torch.manual_seed(0)
    C, Hh = 8, 2
    lin = torch.nn.Linear(6, C)
    cent = CentralityEncoding(C, max_degree=8)
    builder = GraphormerAttnBias(Hh, max_distance=MAXD, edge_dim=2, num_edge_types=4)
    tok = GraphToken(C, Hh)
    layers = torch.nn.ModuleList([GraphormerLayer(C, Hh, attn="gfsa"), GraphormerLayer(C, Hh)])
    final = torch.nn.LayerNorm(C)

    def model(data):
        x = cent(lin(data.x), data.edge_index)
        x, mask = to_dense(x, data.batch, batch_size=data.num_graphs)
        bias = builder.forward_data(data, max_num_nodes=x.size(1))
        x, mask, bias = tok(x, mask, bias)
        for layer in layers:
            x = layer(x, mask, bias)
        return final(x)[:, 0]

    a, b = triangle(), tiny_graph()
    both = model(Batch.from_data_list([a, b]))
    torch.testing.assert_close(both[1], model(Batch.from_data_list([b]))[0])
    torch.testing.assert_close(both[0], model(Batch.from_data_list([a]))[0])


def _path_graph(n):
    """A path 0 - 1 - ... - n-1 with one edge type, run through the data spec ``spd:20``."""
    src = torch.arange(n - 1)
    edge_index = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src])], dim=1)
    data = Data(x=torch.zeros(n, 1), edge_index=edge_index, num_nodes=n,
                edge_attr=torch.zeros(edge_index.size(1), 1, dtype=torch.long))
    return parse_pe("spd:20")(data)


def test_edge_encoding_reads_every_hop_the_model_asks_for():
    # Every hop contributes 1, so c_ij = (sum of min(SPD, L) ones) / min(SPD, L) = 1 for every reachable pair.
    # With paths cut at 5 edges in the data, pair (0, 9) gave 5 / 9 = 0.556.
    g = _path_graph(10)
    enc = EdgeEncoding(1, edge_dim=1, num_edge_types=1, max_hops=20)
    with torch.no_grad():
        enc.encoder.weight.fill_(1.0)
        enc.hop_weight.fill_(1.0)
    dense = enc(g.edge_attr, g.edge_index, g.spd_index, g.spd, g.spd_path, torch.zeros(10, dtype=torch.long))
    assert dense[0, 0, 0, 9].item() == pytest.approx(1.0)
    off_diagonal = ~torch.eye(10, dtype=torch.bool)
    torch.testing.assert_close(dense[0, 0][off_diagonal], torch.ones(90))


def test_edge_encoding_refuses_paths_shorter_than_max_hops():
    g = _path_graph(10)
    short = ShortestPathDistance(max_distance=20, max_path=5)(g.clone())
    enc = EdgeEncoding(1, edge_dim=1, num_edge_types=1, max_hops=20)
    with pytest.raises(ValueError, match=r"max_hops=20.*5 edges"):
        enc(short.edge_attr, short.edge_index, short.spd_index, short.spd, short.spd_path,
            torch.zeros(10, dtype=torch.long))
    # more path edges in the data than the model reads is fine: the model cuts at L (multi_hop_max_dist)
    enc3 = EdgeEncoding(1, edge_dim=1, num_edge_types=1, max_hops=3)
    out = enc3(g.edge_attr, g.edge_index, g.spd_index, g.spd, g.spd_path, torch.zeros(10, dtype=torch.long))
    assert out.shape == (1, 1, 10, 10)


def test_layer_activation_dropout():
    # Graphormer's FFN: Linear -> GELU -> Dropout(activation_dropout) -> Linear (fairseq's act_dropout)
    torch.manual_seed(0)
    layer = GraphormerLayer(8, 2, ffn_channels=16, activation_dropout=1.0, pre_norm=False).train()
    h = torch.randn(3, 8)
    torch.testing.assert_close(layer.ffn(h), layer.ffn[2].bias.expand(3, 8))  # everything after GELU dropped
    assert layer.eval().ffn(h).abs().sum() > 0
    assert "activation_dropout=1.0" in repr(layer)
    assert [k for k in GraphormerLayer(8, 2).state_dict() if k.startswith("ffn")] == \
        ["ffn.0.weight", "ffn.0.bias", "ffn.2.weight", "ffn.2.bias"]  # checkpoint keys as before


def _authors_encoder_layer(layer, x, key_padding_mask, attn_bias):
    """The authors' Graphormer encoder layer (fairseq / GFSA ``GraphormerGraphEncoderLayer``, pre-LN, v1) written out
    with torch ops and ``layer``'s weights: separate q, k, v projections, q scaled before the product, the bias added,
    padded keys at -inf, ``F.dropout`` on each residual branch and after the FFN's GELU, in their order."""
    import torch.nn.functional as F

    B, N, C = x.shape
    H, D = layer.heads, C // layer.heads
    w_q, w_k, w_v = layer.attn.qkv.weight.split(C)
    b_q, b_k, b_v = layer.attn.qkv.bias.split(C)
    p, act_p = layer.dropout.p, layer.activation_dropout

    def heads(t):
        return t.view(B, N, H, D).transpose(1, 2)

    residual = x
    h = layer.norm1(x)
    q = heads(F.linear(h, w_q, b_q) * D ** -0.5)
    k, v = heads(F.linear(h, w_k, b_k)), heads(F.linear(h, w_v, b_v))
    scores = (q @ k.transpose(-1, -2) + attn_bias).masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, N, C)
    x = residual + F.dropout(layer.attn.out(attn), p, True)
    residual = x
    h = F.dropout(F.gelu(layer.ffn[0](layer.norm2(x))), act_p, True)
    return residual + F.dropout(layer.ffn[2](h), p, True)


def test_layer_with_dropout_agrees_with_the_authors_encoder_layer_under_one_seed():
    # Dropout is torch's: under one seed our layer draws the masks the authors' layer draws, so with dropout on the two
    # give the same outputs (on real nodes; our padded rows are zero).
    torch.manual_seed(0)
    layer = GraphormerLayer(16, 4, ffn_channels=32, dropout=0.3, activation_dropout=0.2).train()
    x, mask = to_dense(torch.randn(9, 16), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1]))
    bias = torch.randn(2, 4, 5, 5)
    torch.manual_seed(7)
    ours = layer(x, mask, bias)
    torch.manual_seed(7)
    theirs = _authors_encoder_layer(layer, x, ~mask, bias)
    torch.testing.assert_close(ours[mask], theirs[mask], atol=1e-5, rtol=1e-5)
    torch.manual_seed(8)
    assert not torch.allclose(layer(x, mask, bias)[mask], theirs[mask])  # the masks did change the output


def _relabel(data, perm):
    """The same graph with node ``i`` = node ``perm[i]`` of ``data`` (all pairs stored row-major, as in
    :func:`tiny_graph`); edges keep their ids, so ``spd_path`` stays valid."""
    n = data.num_nodes
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    return Data(x=data.x[perm], edge_index=inv[data.edge_index], edge_attr=data.edge_attr,
                spd_index=data.spd_index, spd=data.spd.view(n, n)[perm][:, perm].flatten(),
                spd_path=data.spd_path.view(n, n, -1)[perm][:, perm].reshape(n * n, -1), num_nodes=n)


def _edgeless(n=3):
    """``n`` isolated nodes: every off-diagonal pair unreachable, no path edges."""
    data = Data(x=torch.randn(n, 6), edge_index=torch.zeros(2, 0, dtype=torch.long),
                edge_attr=torch.zeros(0, 2, dtype=torch.long), num_nodes=n)
    return ShortestPathDistance(max_distance=MAXD, max_path=5)(data)


def _graphormer():
    """Encoders, graph token and two layers (GFSA with all three coefficients learnable, then softmax); the model
    returns every row (token first) and the mask."""
    torch.manual_seed(0)
    C, Hh = 8, 2
    mods = torch.nn.ModuleDict({
        "lin": torch.nn.Linear(6, C), "cent": CentralityEncoding(C, max_degree=8),
        "bias": GraphormerAttnBias(Hh, max_distance=MAXD, edge_dim=2, num_edge_types=4), "tok": GraphToken(C, Hh),
        "layers": torch.nn.ModuleList([GraphormerLayer(C, Hh, attn="gfsa"), GraphormerLayer(C, Hh)]),
        "final": torch.nn.LayerNorm(C)}).double()

    def model(data):
        x = mods["cent"](mods["lin"](data.x.double()), data.edge_index)
        x, mask = to_dense(x, data.batch, batch_size=data.num_graphs)
        bias = mods["bias"].forward_data(data, max_num_nodes=x.size(1))
        x, mask, bias = mods["tok"](x, mask, bias)
        for layer in mods["layers"]:
            x = layer(x, mask, bias)
        return mods["final"](x), mask

    return model, mods


def test_pipeline_permutation_equivariance():
    """Relabelling a graph's nodes permutes the node rows and leaves the graph token's row (the readout) unchanged:
    the degree, SPD and path encodings (Eqs. 5-7) follow the nodes."""
    model, _ = _graphormer()
    b = tiny_graph()
    out, _ = model(Batch.from_data_list([b]))
    for perm in (torch.tensor([3, 1, 0, 2]), torch.tensor([2, 0, 3, 1])):
        out_p, _ = model(Batch.from_data_list([_relabel(b, perm)]))
        torch.testing.assert_close(out_p[0, 0], out[0, 0])
        torch.testing.assert_close(out_p[0, 1:], out[0, 1:][perm])


def test_pipeline_edgeless_graph_and_gradients_reach_every_parameter():
    model, mods = _graphormer()
    e = _edgeless()
    # an edgeless graph: the spatial bias is the unreachable bucket off the diagonal, the edge bias is 0
    bias = mods["bias"].forward_data(Batch.from_data_list([e]))
    spatial = mods["bias"].spatial.embedding.weight
    off = ~torch.eye(3, dtype=torch.bool)
    torch.testing.assert_close(bias[0].permute(1, 2, 0)[off], spatial[U].expand(6, 2))
    torch.testing.assert_close(bias[0].permute(1, 2, 0)[~off], spatial[0].expand(3, 2))
    # ... computed alone or next to graphs with edges (a whole batch without edges too)
    out, mask = model(Batch.from_data_list([triangle(), e, tiny_graph()]))
    alone, _ = model(Batch.from_data_list([e]))
    torch.testing.assert_close(out[1, :4], alone[0])
    assert torch.isfinite(out[mask]).all()
    out[mask].square().sum().backward()
    for name, p in mods.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name

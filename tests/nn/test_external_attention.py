"""ExternalAttention against a naive implementation of GEAET Eqs. 2-5, and its invariances."""
import math

import pytest
import torch

from gea_graph.nn import ExternalAttention
from gea_graph.nn.external_attention import group_log_softmax


def _lin(lin, x):
    out = x @ lin.weight.T
    return out + lin.bias if lin.bias is not None else out


def _dnorm_naive(logits, eps):
    """Eq. 3 with explicit loops: softmax over rows per column, then L1 over columns per row."""
    n, S = logits.shape
    hat = torch.zeros_like(logits)
    for j in range(S):
        denom = sum(math.exp(logits[k, j].item()) for k in range(n))
        for i in range(n):
            hat[i, j] = math.exp(logits[i, j].item()) / denom
    out = torch.zeros_like(hat)
    for i in range(n):
        out[i] = hat[i] / (hat[i].sum() + eps)
    return out


def double_normalize(logits, index=None, eps=1e-9):
    """Eq. 3 on logits [M, H, S] with torch ops, group by group: softmax over the rows, then L1 over the units."""
    groups = torch.zeros(logits.size(0), dtype=torch.long) if index is None else index
    p = torch.zeros_like(logits)
    for g in groups.unique():
        p[groups == g] = torch.softmax(logits[groups == g], dim=0)
    total = p.sum(dim=-1, keepdim=True)
    return p / (total if eps is None else total + eps)


def _gea_naive(m, x, batch, edge_attr=None, edge_batch=None):
    """Per graph (or whole batch for norm_scope='batch'), per head, from the equations."""
    H, dh = m.heads, m.head_channels
    groups = range(int(batch.max()) + 1) if m.norm_scope == "graph" else [None]

    def run(feat, group_of, key, value, strided):
        out = torch.zeros(feat.size(0), m.channels, dtype=feat.dtype)
        attn = torch.zeros(feat.size(0), H, m.units, dtype=feat.dtype)
        for g in groups:
            rows = torch.arange(feat.size(0)) if g is None else (group_of == g).nonzero().view(-1)
            if rows.numel() == 0:
                continue
            f = feat[rows]
            if m.shared is not None:
                f = _lin(m.shared, f)
            for h in range(H):
                cols = torch.arange(h, m.channels, H) if strided else torch.arange(h * dh, (h + 1) * dh)
                a = _dnorm_naive(_lin(key, f[:, cols]), m.eps)  # Eq. 3 on X_h U_k^T
                out[rows, h * dh:(h + 1) * dh] = _lin(value, a)   # alpha U_v
                attn[rows, h] = a
        return out, attn

    x_out, attn = run(x, batch, m.node_key, m.node_value, False)
    if m.out is not None:
        x_out = _lin(m.out, x_out)
    e_out = edge_attr
    if m.edge_units:
        e_out, _ = run(edge_attr, edge_batch, m.edge_key, m.edge_value,
                       m.edge_head_split == "strided")
        if m.edge_out is not None:
            e_out = _lin(m.edge_out, e_out)
    return x_out, e_out, attn


def _batch(sizes, channels, dtype=torch.float64, edges_per_node=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), channels, generator=g, dtype=dtype)
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    ei, start = [], 0
    for n in sizes:
        e = torch.randint(0, n, (2, edges_per_node * n), generator=g) + start
        ei.append(e)
        start += n
    edge_index = torch.cat(ei, 1)
    edge_attr = torch.randn(edge_index.size(1), channels, generator=g, dtype=dtype)
    return x, batch, edge_index, edge_attr


CONFIGS = [
    {},
    {"edge_units": True},
    {"edge_units": True, "shared_unit": True},
    {"edge_units": True, "shared_unit": True, "edge_head_split": "strided"},
    {"shared_unit": True},  # crashes in the authors' code
    {"units": 5, "out_proj": True, "edge_units": True},
    {"norm_scope": "batch", "edge_units": True},
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_matches_naive_equations(cfg):
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, **cfg).double()
    x, batch, ei, ea = _batch([3, 1, 4], 8)
    eb = batch[ei[0]]
    out, e_out, attn, _ = m(x, batch, ea, eb, return_attention=True)
    ref, e_ref, attn_ref = _gea_naive(m, x, batch, ea, eb)
    assert out.shape == (8, 8)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(attn, attn_ref)
    torch.testing.assert_close(e_out, e_ref)
    if not m.edge_units:
        assert e_out is ea


def test_parameter_counts_match_paper():
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(ExternalAttention(224, 8, 28)) == 1624  # Peptides-Struct, node-only
    assert count(ExternalAttention(40, 4, 10)) == 220  # MNIST / CIFAR10
    assert count(ExternalAttention(68, 4, 17)) == 612  # VOC / COCO
    # PATTERN: node + edge units (4 x 272) + shared unit 4,160
    assert count(ExternalAttention(64, 4, 16, edge_units=True, shared_unit=True)) == 4 * 272 + 4160
    assert count(ExternalAttention(64, 4, 16, out_proj=True)) == 2 * 272 + 64 * 65


def test_units_default_and_free():
    assert ExternalAttention(40, 4).units == 10
    m = ExternalAttention(40, 4, 7)
    assert m.node_key.weight.shape == (7, 10) and m.node_value.weight.shape == (10, 7)
    with pytest.raises(ValueError):
        ExternalAttention(10, 3)
    with pytest.raises(ValueError):
        ExternalAttention(8, 2, norm_scope="graphs")


def test_graph_scope_independent_of_batch_mates():
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, units=3, edge_units=True, shared_unit=True).double()
    x, batch, ei, ea = _batch([4, 3, 5], 8, seed=1)
    eb = batch[ei[0]]
    out, e_out = m(x, batch, ea, eb)
    # graph 1 alone
    nodes, edges = batch == 1, eb == 1
    alone, e_alone = m(x[nodes], None, ea[edges])
    torch.testing.assert_close(out[nodes], alone, rtol=0, atol=1e-12)
    torch.testing.assert_close(e_out[edges], e_alone, rtol=0, atol=1e-12)


def test_batch_scope_couples_batch_mates():
    """Documents the authors' behaviour: with norm_scope='batch' a graph's output changes when
    its batch-mates change (the softmax denominator runs over the whole mini-batch)."""
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, units=3, norm_scope="batch").double()
    x, batch, _, _ = _batch([4, 3], 8, seed=2)
    out, _ = m(x, batch)
    alone, _ = m(x[batch == 0], None)
    assert not torch.allclose(out[batch == 0], alone)
    # ... and it is exactly a softmax over all rows of the batch
    torch.testing.assert_close(out, m(x, torch.zeros_like(batch))[0])


def test_permutation_equivariance():
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, units=4, edge_units=True).double()
    x, batch, ei, ea = _batch([4, 5], 8, seed=3)
    eb = batch[ei[0]]
    out, e_out = m(x, batch, ea, eb)
    perm, eperm = torch.randperm(x.size(0)), torch.randperm(ea.size(0))
    out_p, e_out_p = m(x[perm], batch[perm], ea[eperm], eb[eperm])
    torch.testing.assert_close(out_p, out[perm])
    torch.testing.assert_close(e_out_p, e_out[eperm])


def test_degenerate_inputs_are_finite():
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, edge_units=True, shared_unit=True)
    # single-node graphs, a graph without edges, identical node features
    x = torch.ones(6, 8)
    batch = torch.tensor([0, 1, 2, 2, 2, 3])
    ei = torch.tensor([[2, 3], [3, 4]])
    ea = torch.randn(2, 8)
    out, e_out = m(x, batch, ea, batch[ei[0]])
    assert torch.isfinite(out).all() and torch.isfinite(e_out).all()
    # identical features in one graph: every node gets the same output, the softmax is uniform
    assert torch.allclose(out[2], out[3]) and torch.allclose(out[3], out[4])
    # empty graph batch and no edges at all
    out, e_out = m(torch.randn(0, 8), torch.zeros(0, dtype=torch.long), torch.randn(0, 8),
                   torch.zeros(0, dtype=torch.long))
    assert out.shape == (0, 8) and e_out.shape == (0, 8)
    out, e_out = m(torch.randn(1, 8), None, torch.randn(0, 8))  # one graph, one node, no edges
    assert torch.isfinite(out).all() and e_out.shape == (0, 8)
    # huge logits do not overflow (max shift per graph)
    out, _ = m(torch.full((3, 8), 1e4), torch.tensor([0, 0, 1]))
    assert torch.isfinite(out).all()


def test_group_log_softmax_far_apart_groups_match_the_reference():
    """Groups whose exponentials would underflow or overflow unshifted are exact (each group shifts by its max)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 2, 3, generator=g, dtype=torch.float64)
    index = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    logits[index == 1] -= 150.0  # exp underflows in float32
    logits[index == 2] += 120.0  # exp overflows in float32
    ref = torch.cat([torch.log_softmax(logits[index == k], dim=0) for k in range(3)])
    out = group_log_softmax(logits.float(), index, 3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(group_log_softmax(logits, None, 1), torch.log_softmax(logits, dim=0))


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, units=3, edge_units=True, shared_unit=True, out_proj=True)
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    out, e_out = m(x, batch, ea, batch[ei[0]])
    (out.square().sum() + e_out.square().sum()).backward()
    for name, p in m.named_parameters():
        if name in ("node_key.bias", "edge_key.bias"):  # cancels in the per-column softmax: 0 up to rounding
            assert p.grad is not None and p.grad.abs().max() < 1e-5, name
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dtypes_and_autocast():
    m = ExternalAttention(8, heads=2, edge_units=True)
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    out64, _ = m.double()(x.double(), batch, ea.double(), batch[ei[0]])
    assert out64.dtype == torch.float64
    m.float()
    ref, _ = m(x, batch, ea, batch[ei[0]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, e_out = m(x, batch, ea, batch[ei[0]])
    assert torch.isfinite(out).all() and torch.isfinite(e_out).all()
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.1)


def test_inputs_not_mutated():
    m = ExternalAttention(8, heads=2, edge_units=True, shared_unit=True)
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    x0, ea0 = x.clone(), ea.clone()
    m(x, batch, ea, batch[ei[0]])
    assert torch.equal(x, x0) and torch.equal(ea, ea0)


def test_attention_maps_and_store():
    m = ExternalAttention(8, heads=2, units=3, edge_units=True)
    x, batch, ei, ea = _batch([3, 4], 8, dtype=torch.float32)
    assert m.attention is None
    m.store_attention = True
    m(x, batch, ea, batch[ei[0]])
    assert m.attention.shape == (7, 2, 3) and not m.attention.requires_grad
    assert m.edge_attention.shape == (ea.size(0), 2, 3)
    torch.testing.assert_close(m.attention.sum(-1), torch.ones(7, 2))  # rows sum to 1 (L1 step)
    _, _, attn, eattn = m(x, batch, ea, batch[ei[0]], return_attention=True)
    torch.testing.assert_close(attn, m.attention)
    torch.testing.assert_close(eattn, m.edge_attention)


def test_edge_units_need_edge_batch():
    m = ExternalAttention(8, heads=2, edge_units=True)
    x, batch, _, ea = _batch([3, 4], 8, dtype=torch.float32)
    with pytest.raises(ValueError, match="edge_batch"):
        m(x, batch, ea)
    m(x, None, ea)  # one graph: fine


def test_repr_and_reset():
    m = ExternalAttention(8, heads=2, units=3, edge_units=True)
    assert str(m) == ("ExternalAttention(8, heads=2, units=3, edge_units=True, shared_unit=False, "
                      "norm_scope='graph', out_proj=False, eps=1e-09, edge_head_split='contiguous')")
    w = m.node_key.weight.clone()
    m.reset_parameters()
    assert not torch.equal(w, m.node_key.weight)


@pytest.mark.parametrize("grouped", [True, False])
def test_group_log_softmax_gradcheck(grouped):
    logits = torch.randn(9, 2, 3, dtype=torch.float64, requires_grad=True)
    index = torch.tensor([0, 0, 0, 2, 2, 3, 3, 3, 3]) if grouped else None
    n = 4 if grouped else 1
    assert torch.autograd.gradcheck(lambda t: group_log_softmax(t, index, n).exp(), (logits,))


@pytest.mark.parametrize("cfg", [{}, {"norm_scope": "batch"}, {"edge_units": True,
                                                                        "edge_head_split": "strided"}])
def test_gradients_match_autograd_on_the_equations(cfg):
    """Outputs and gradients against plain autograd on the equations written group by group."""
    torch.manual_seed(0)
    m = ExternalAttention(8, heads=2, units=3, **cfg).double()
    x, batch, ei, ea = _batch([3, 1, 4], 8)
    eb = batch[ei[0]]
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: m(t, batch, ea, eb)[0], (x,))
    out, e_out = m(x, batch, ea, eb)
    w = torch.randn_like(out)
    loss = (out * w).sum() + (e_out.sin()).sum()
    grads = torch.autograd.grad(loss, [x] + list(m.parameters()), allow_unused=True)

    def reference(t):
        index = batch if m.norm_scope == "graph" else None
        a = double_normalize(m.node_key(t.view(-1, 2, 4)), index, m.eps)
        o = m.node_value(a).reshape(-1, 8)
        e = ea
        if m.edge_units:
            eh = ea.view(-1, 4, 2).transpose(1, 2)
            e = m.edge_value(double_normalize(m.edge_key(eh), eb, m.eps)).reshape(-1, 8)
        return o, e

    out_r, e_r = reference(x)
    torch.testing.assert_close(out_r, out)
    loss_r = (out_r * w).sum() + (e_r.sin()).sum()
    grads_r = torch.autograd.grad(loss_r, [x] + list(m.parameters()), allow_unused=True)
    for g, gr in zip(grads, grads_r):
        if gr is None:
            assert g is None or g.abs().sum() == 0
        else:
            torch.testing.assert_close(g, gr)


def _no_eps_reference(m, x):
    """The authors' GEANet.forward written out with torch ops: batch softmax over dim 0, L1 with no epsilon."""
    h = x.view(x.size(0), m.heads, m.head_channels)
    p = torch.softmax(_lin(m.node_key, h), dim=0)
    return _lin(m.node_value, p / p.sum(dim=2, keepdim=True)).reshape(x.size(0), -1)


def test_eps_none_is_the_authors_l1_step_and_differs_at_large_activations():
    torch.manual_seed(0)
    ours = ExternalAttention(32, heads=4, norm_scope="batch")
    authors = ExternalAttention(32, heads=4, norm_scope="batch", eps=None)
    authors.load_state_dict(ours.state_dict())
    x = 20.0 * torch.randn(400, 32)  # large activations: some nodes get tiny softmax values in every unit
    out_authors, _ = authors(x)
    torch.testing.assert_close(out_authors, _no_eps_reference(authors, x), rtol=1e-4, atol=1e-5)
    out_ours, _ = ours(x)
    assert (out_ours - out_authors).abs().max() > 0.1  # about 0.35 here
    small = 0.5 * torch.randn(400, 32)  # ordinary activations: the epsilon is invisible
    torch.testing.assert_close(ours(small)[0], authors(small)[0], rtol=1e-5, atol=1e-6)
    assert "eps=None" in repr(authors)
    with pytest.raises(ValueError, match="eps"):
        ExternalAttention(32, heads=4, eps=-1.0)


@pytest.mark.parametrize("grouped", [False, True])
def test_eps_none_is_exact_where_the_authors_formula_underflows(grouped):
    torch.manual_seed(1)
    m = ExternalAttention(8, heads=2, eps=None, norm_scope="graph" if grouped else "batch")
    x = (300.0 * torch.randn(60, 8)).requires_grad_()
    batch = torch.arange(60) // 20 if grouped else None
    out, _, attn, _ = m(x, batch, return_attention=True)
    assert torch.isnan(_no_eps_reference(m, x.detach())).any() or grouped  # the plain formula: 0/0
    h = x.detach().double().view(60, 2, 4)
    logits = h @ m.node_key.weight.detach().double().T  # the key bias cancels in the softmax
    groups = batch if grouped else torch.zeros(60, dtype=torch.long)
    log_p = torch.cat([torch.log_softmax(logits[groups == g], dim=0) for g in groups.unique()])
    ref_alpha = torch.softmax(log_p, dim=-1)  # the exact value of p / sum(p), in log space
    torch.testing.assert_close(attn.double(), ref_alpha, rtol=1e-4, atol=1e-6)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


# --- Worked by hand (GEAET Eqs. 2-4) -------------------------------------------------------------------------------
# One head, d = S = 2, no biases, U_k = I (so the logits are X itself) and U_v^T = [[1, 2], [3, 4]] (the weight of
# Linear(S -> d)). Two nodes, x_0 = (0, 0), x_1 = (ln 3, 0). Eq. 3, softmax over the nodes per unit: unit 0 gets
# (1, 3) / 4, unit 1 gets (1, 1) / 2; then L1 over the units per node: node 0 (1/4, 1/2) / (3/4) = (1/3, 2/3),
# node 1 (3/4, 1/2) / (5/4) = (3/5, 2/5). Output alpha U_v: node 0 (1/3)(1, 3) + (2/3)(2, 4) = (5/3, 11/3),
# node 1 (3/5)(1, 3) + (2/5)(2, 4) = (7/5, 17/5).
HAND_X = [[0.0, 0.0], [math.log(3.0), 0.0]]
HAND_ALPHA = [[1 / 3, 2 / 3], [3 / 5, 2 / 5]]
HAND_OUT = [[5 / 3, 11 / 3], [7 / 5, 17 / 5]]
HAND_VALUE = [[1.0, 2.0], [3.0, 4.0]]


def _hand_module(eps=None, **kw):
    m = ExternalAttention(2, heads=1, units=2, bias=False, eps=eps, **kw).double()
    with torch.no_grad():
        for key, value in ((m.node_key, m.node_value), (m.edge_key, m.edge_value)):
            if key is not None:
                key.weight.copy_(torch.eye(2))
                value.weight.copy_(torch.tensor(HAND_VALUE))
    return m


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_hand_computed_eq3_one_graph_without_edges():
    m = _hand_module(edge_units=True)
    x = _t(HAND_X)
    # one graph, no edges: GEA reads no edges, its softmax spans the graph's two (unconnected) nodes
    out, e_out, attn, e_attn = m(x, torch.zeros(2, dtype=torch.long), torch.zeros(0, 2, dtype=torch.float64),
                                 torch.zeros(0, dtype=torch.long), return_attention=True)
    torch.testing.assert_close(attn[:, 0], _t(HAND_ALPHA), rtol=0, atol=1e-15)
    torch.testing.assert_close(out, _t(HAND_OUT), rtol=0, atol=1e-14)
    assert e_out.shape == (0, 2) and e_attn.shape == (0, 1, 2)
    # the edge units compute the same equation on edge features, softmax over the graph's edges (Eq. 4)
    _, e_out, _, e_attn = m(x, None, x.clone(), return_attention=True)
    torch.testing.assert_close(e_attn[:, 0], _t(HAND_ALPHA), rtol=0, atol=1e-15)
    torch.testing.assert_close(e_out, _t(HAND_OUT), rtol=0, atol=1e-14)
    # the default eps = 1e-9 moves it by about 1e-9 only
    torch.testing.assert_close(_hand_module(eps=1e-9)(x)[0], _t(HAND_OUT), rtol=0, atol=1e-8)


def test_hand_computed_eq3_single_node_graphs_and_scopes():
    m = _hand_module()
    x = _t(HAND_X)
    # two single-node graphs: each unit's softmax is over one node (= 1), so alpha = (1/2, 1/2) whatever x is
    out, _, attn, _ = m(x, torch.tensor([0, 1]), return_attention=True)
    torch.testing.assert_close(attn[:, 0], torch.full((2, 2), 0.5, dtype=torch.float64), rtol=0, atol=1e-15)
    torch.testing.assert_close(out, _t([[1.5, 3.5], [1.5, 3.5]]), rtol=0, atol=1e-14)
    # the hand graph next to a batch-mate: unchanged per graph; over the whole batch (the authors' scope) the
    # third node x_2 = (0, ln 2) enters the sums: unit 0 gets (1, 3, 1) / 5, unit 1 (1, 1, 2) / 4
    x3 = torch.cat([x, _t([[0.0, math.log(2.0)]])])
    batch = torch.tensor([0, 0, 1])
    torch.testing.assert_close(m(x3, batch)[0][:2], _t(HAND_OUT), rtol=0, atol=1e-14)
    coupled = _hand_module(norm_scope="batch")
    hat = _t([[1 / 5, 1 / 4], [3 / 5, 1 / 4], [1 / 5, 1 / 2]])
    alpha = hat / hat.sum(-1, keepdim=True)
    torch.testing.assert_close(coupled(x3, batch, return_attention=True)[2][:, 0], alpha, rtol=0, atol=1e-15)


def test_hand_computed_shared_unit_and_heads_share_the_units():
    # Eq. 4: X U_s U_k^T. With U_s = diag(2, 1) the input (ln 3 / 2, 0) becomes the hand example's x_1.
    m = _hand_module(shared_unit=True)
    with torch.no_grad():
        m.shared.weight.copy_(torch.diag(_t([2.0, 1.0])))
    out, _ = m(_t([[0.0, 0.0], [math.log(3.0) / 2, 0.0]]))
    torch.testing.assert_close(out, _t(HAND_OUT), rtol=0, atol=1e-14)
    # Eq. 5: two heads use the same units on their own channel slices. Head 1 sees the nodes swapped, so its
    # alpha is the hand alpha with the nodes swapped: node 0 (3/5, 2/5), node 1 (1/3, 2/3).
    two = ExternalAttention(4, heads=2, units=2, bias=False, eps=None).double()
    with torch.no_grad():
        two.node_key.weight.copy_(torch.eye(2))
        two.node_value.weight.copy_(_t(HAND_VALUE))
    x = torch.cat([_t(HAND_X), _t(HAND_X).flip(0)], dim=1)
    out, _, attn, _ = two(x, None, return_attention=True)
    torch.testing.assert_close(attn[:, 1], _t(HAND_ALPHA).flip(0), rtol=0, atol=1e-15)
    torch.testing.assert_close(out, torch.cat([_t(HAND_OUT), _t(HAND_OUT).flip(0)], dim=1), rtol=0, atol=1e-14)


@pytest.mark.parametrize("eps", [1e-9, None])
def test_batch_scope_leaves_the_padding_rows_of_a_padded_batch_out(eps):
    # A fixed-size batch (gea_graph.train.fixed_size) appends padding nodes and edges; the batch-wide softmax sums
    # over the real rows only, so the real rows' outputs and gradients are the unpadded batch's.
    from gea_graph.nn.norm import padding_rows

    torch.manual_seed(0)
    att = ExternalAttention(8, heads=2, edge_units=True, norm_scope="batch", eps=eps)
    x, e = torch.randn(7, 8, requires_grad=True), torch.randn(11, 8, requires_grad=True)
    x_pad = torch.cat([x, 50 * torch.randn(3, 8)])  # large padding values would dominate an unmasked sum
    e_pad = torch.cat([e, 50 * torch.randn(2, 8)])
    ref_x, ref_e = att(x, edge_attr=e)
    with padding_rows(torch.arange(10) < 7, torch.arange(13) < 11):
        out_x, out_e = att(x_pad, edge_attr=e_pad)
    assert torch.isfinite(out_x).all() and torch.isfinite(out_e).all()
    torch.testing.assert_close(out_x[:7], ref_x, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out_e[:11], ref_e, atol=1e-6, rtol=1e-5)
    ref = torch.autograd.grad(ref_x.sum() + ref_e.sum(), [x, e] + list(att.parameters()))
    got = torch.autograd.grad(out_x[:7].sum() + out_e[:11].sum(), [x, e] + list(att.parameters()))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
